"""Larger than memory: zarr to zarr through Pow and MatMul on dask, with bounded memory.

``python -m numba_onnx_ops stream`` runs it (see ``--help``).  The pipeline itself is a few
lines of user code (``_pow_stage`` and ``_matmul_stage``); the rest makes the inputs, checks
blocks of the outputs against the in-memory calls and reports the peak memory, read from the
kernel's high-water mark of each process that computed (reset before each stage).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

MATMUL_K = 512  # A's columns (the contraction), one chunk
MATMUL_N = 256  # B's columns: B is a small numpy operand, passed whole to every task
INPUTS, OUTPUTS = ("x.zarr", "a.zarr"), ("y.zarr", "c.zarr")  # in the work folder


def _zarr_array(path: Path, shape, chunks, dtype):
    """An empty, uncompressed zarr array (random data does not compress; this measures the
    pipeline, not a codec)."""
    import zarr

    if hasattr(zarr, "create_array"):  # zarr 3
        return zarr.create_array(
            store=str(path), shape=shape, chunks=chunks, dtype=dtype, compressors=None,
            overwrite=True,
        )  # fmt: skip
    return zarr.open_array(
        str(path), mode="w", shape=shape, chunks=chunks, dtype=dtype, compressor=None
    )


def _pow_stage(src, dst, exponent=3.7):
    import dask.array as da

    import numba_onnx_ops as nox

    x = da.from_zarr(src)
    da.store(nox.pow(x, exponent), dst, lock=False)


def _matmul_stage(src, b, dst):
    import dask.array as da

    import numba_onnx_ops as nox

    a = da.from_zarr(src)
    da.store(nox.matmul(a, b), dst, lock=False)


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _peak_rss_bytes() -> int:
    """This process's peak resident memory since the last ``_reset_peak`` (VmHWM)."""
    return _status_bytes("VmHWM")


def _rss_bytes() -> int:
    return _status_bytes("VmRSS")


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident size (Linux >= 4.0)
    except OSError:
        pass


def _make_inputs(workdir: Path, nbytes: int, chunk_bytes: int, cols: int, seed: int):
    import dask.array as da

    rng = da.random.default_rng(seed)
    rows = max(1, nbytes // (2 * cols))
    crows = max(1, chunk_bytes // (2 * cols))
    x = (rng.random((rows, cols), dtype=np.float32, chunks=(crows, cols)) * 4).astype(np.float16)
    xz = _zarr_array(workdir / "x.zarr", x.shape, x.chunksize, np.float16)
    arows = max(1, nbytes // (4 * MATMUL_K))
    carows = max(1, chunk_bytes // (4 * MATMUL_K))
    a = rng.integers(-1000, 1000, (arows, MATMUL_K), dtype=np.int32, chunks=(carows, MATMUL_K))
    az = _zarr_array(workdir / "a.zarr", a.shape, a.chunksize, np.int32)
    da.store([x, a], [xz, az], lock=False)
    b = np.random.default_rng(seed + 1).integers(-1000, 1000, (MATMUL_K, MATMUL_N), np.int32)
    return xz, az, b


def prepare(
    workdir: str | os.PathLike,
    nbytes: int,
    *,
    chunk_bytes: int = 16 << 20,
    cols: int = 8192,
    seed: int = 0,
) -> dict:
    """Make the inputs in ``workdir``: a float16 ``x`` and an int32 ``a`` of ``nbytes`` each
    in row chunks of ``chunk_bytes``, a small int32 ``b``, and empty outputs ``y``, ``c``."""
    workdir = Path(workdir)
    xz, az, b = _make_inputs(workdir, nbytes, chunk_bytes, cols, seed)
    yz = _zarr_array(workdir / "y.zarr", xz.shape, xz.chunks, np.float16)
    cz = _zarr_array(workdir / "c.zarr", (az.shape[0], MATMUL_N), (az.chunks[0], MATMUL_N), "i4")
    return {"x": xz, "y": yz, "a": az, "b": b, "c": cz, "nbytes": nbytes}


def warm(data: dict, client=None) -> None:
    """Compile (or load) the kernels the stages run, on one block of each input, here or on
    every worker of ``client``: compilation is not part of a stage's time or memory."""

    def one_block_each():
        from .. import matmul, pow

        pow(data["x"][: data["x"].chunks[0]], 3.7)
        matmul(data["a"][: data["a"].chunks[0]], data["b"])

    if client is None:
        one_block_each()
    else:
        client.run(one_block_each)


def stages(data: dict) -> dict:
    """The pipeline's stages by name, each a call of no arguments."""
    return {
        "pow float16 ^ 3.7": lambda: _pow_stage(data["x"], data["y"]),
        f"matmul int32 (n,{MATMUL_K})@({MATMUL_K},{MATMUL_N})": lambda: _matmul_stage(
            data["a"], data["b"], data["c"]
        ),
    }


def run(data: dict, client=None) -> dict:
    """Run every stage; return, per stage, its seconds, and the resident memory before it and
    its peak, per process that computed.

    With ``client`` (a ``distributed.Client``) the stages run on its workers and the memory is
    each worker's; without, on dask's threaded scheduler in this process.
    """
    import dask

    report = {}
    for name, stage in stages(data).items():
        if client is not None:
            client.run(_reset_peak)
            before = sorted(client.run(_rss_bytes).values())
            start = time.perf_counter()
            stage()
            seconds = time.perf_counter() - start
            peaks = sorted(client.run(_peak_rss_bytes).values())
        else:
            _reset_peak()
            before = [_rss_bytes()]
            start = time.perf_counter()
            with dask.config.set(scheduler="threads"):
                stage()
            seconds = time.perf_counter() - start
            peaks = [_peak_rss_bytes()]
        report[name] = {"seconds": seconds, "rss_before": before, "peak_rss": peaks}
    return report


def check(data: dict) -> None:
    """The first and last row blocks of both outputs against the in-memory calls."""
    from .. import matmul, pow

    b = data["b"]
    pairs = (
        (data["x"], data["y"], lambda v: pow(v, 3.7)),
        (data["a"], data["c"], lambda v: matmul(v, b)),
    )
    for src, dst, call in pairs:
        rows = src.chunks[0]
        for lo in (0, (math.ceil(src.shape[0] / rows) - 1) * rows):
            if not np.array_equal(dst[lo : lo + rows], call(src[lo : lo + rows]), equal_nan=True):
                raise AssertionError(f"rows {lo}:{lo + rows} differ from the in-memory call")


# ``stream`` command: sizes on the command line, in bytes.
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
SIZE_FORMATS = "bytes, or a number with k, M, G or T (powers of 1024; iB or B may follow): "
SIZE_FORMATS += "4096, 512MiB, 1.5G"
MIN_BYTES = 1 << 20  # --size and --chunk: smaller chunks spend more time in dask than in Pow
# A worker process holds about this much of its own (Python, numba, dask, the kernels) before
# any block, then up to this many chunks at once: a block, its float32 intermediates while the
# inputs are made, the result, and the next task's block.
WORKER_OWN_BYTES = 256 << 20
WORKER_CHUNKS = 8
MEMORY_LIMIT = 1 << 30  # per worker process, unless --memory-limit says otherwise
DISK_PER_BYTE = 3.5  # the inputs x and a, the output y as large as x, and c half of a
CONNECT_TIMEOUT_S = 10  # a scheduler that is up answers within milliseconds


def parse_size(text: str) -> int:
    """Bytes from ``text``: a number, optionally with a unit (``512MiB``, ``1.5G``, ``4096``)."""
    match = re.fullmatch(r"\s*(\d+\.?\d*|\.\d+)\s*(?:([kmgt])(?:i?b)?|b)?\s*", text, re.I)
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: give {SIZE_FORMATS}")
    return int(float(match[1]) * _UNITS[(match[2] or "").lower()])


def fmt_bytes(nbytes: float) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def _count(text: str) -> int:
    """A number of worker processes: 0 up to the cores this process may run on."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: give a whole number") from None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not 0 <= count <= (cores or 1):
        raise argparse.ArgumentTypeError(
            f"{count} is out of range: 0 (no worker processes) to {cores or 1} (the cores here)"
        )
    return count


def add_parser(commands, **kwargs) -> None:
    """The ``stream`` command of ``python -m numba_onnx_ops`` (``kwargs`` go to its parser)."""
    p = commands.add_parser(
        "stream",
        help="stream zarr to zarr through Pow and MatMul on dask (larger than memory)",
        description="Make a float16 and an int32 zarr input of SIZE each, stream "
        "pow(x, 3.7) and matmul(a, b) (b: a 512x256 int32 numpy array) into zarr outputs, "
        "check the first and last row blocks against the in-memory calls, and report each "
        "stage's time and the peak resident memory of every process that computed. The data "
        "(about 3.5 times SIZE) go to --dir, kept, or to a temporary folder removed at the end; "
        "either is named at the start and at the end, with its size. Needs the "
        "dask extra: pip install 'numba_onnx_ops[dask]'. Sizes are " + SIZE_FORMATS + ".",
        **kwargs,
    )
    p.add_argument(
        "--size",
        default="1GiB",
        type=parse_size,
        help="bytes per input (default 1GiB, at least 1MiB); the work directory needs 3.5 "
        "times as much free space",
    )
    p.add_argument(
        "--chunk",
        default="16MiB",
        type=parse_size,
        help="bytes per row chunk (default 16MiB, at least 1MiB)",
    )
    p.add_argument(
        "--dir",
        help="folder for the inputs and outputs, kept at the end (created if missing, but not "
        "its parent; x.zarr, a.zarr, y.zarr and c.zarr there are replaced); default: a "
        "temporary folder, removed at the end",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=_count,
        default=0,
        help="run on a LocalCluster of this many single-threaded worker processes, at most one "
        "per core (default 0: dask's threaded scheduler in this process)",
    )
    where.add_argument(
        "--scheduler",
        help="address of a running dask.distributed scheduler, e.g. tcp://scheduler-host:8786 "
        f"(gives up after {CONNECT_TIMEOUT_S} s without an answer)",
    )
    p.add_argument(
        "--memory-limit",
        type=parse_size,
        help="memory per worker process, with --workers only (default 1GiB); it must hold "
        f"{fmt_bytes(WORKER_OWN_BYTES)} of the worker's own and {WORKER_CHUNKS} chunks",
    )
    p.set_defaults(parser=p)  # usage errors show the stream command's usage


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the ``stream`` arguments, as one line, or ``None``."""
    if args.size < MIN_BYTES or args.chunk < MIN_BYTES:
        option, value = ("--size", args.size) if args.size < MIN_BYTES else ("--chunk", args.chunk)
        return f"{option} {fmt_bytes(value)} is below the least, {fmt_bytes(MIN_BYTES)}"
    if args.memory_limit is not None and not args.workers:
        return (
            "--memory-limit applies to the worker processes of --workers; without --workers it "
            "would have no effect"
        )
    if args.workers:
        limit = args.memory_limit or MEMORY_LIMIT
        need = WORKER_OWN_BYTES + WORKER_CHUNKS * min(args.chunk, args.size)
        if limit < need:
            return (
                f"--memory-limit {fmt_bytes(limit)}{'' if args.memory_limit else ' (the default)'}"
                f" is too small for {fmt_bytes(args.chunk)} chunks: a worker needs "
                f"{fmt_bytes(WORKER_OWN_BYTES)} of its own and room for {WORKER_CHUNKS} chunks "
                f"({fmt_bytes(need)}); raise it or lower --chunk"
            )
    where = Path(args.dir or tempfile.gettempdir()).absolute()
    if where.exists() and not where.is_dir():
        return f"--dir {args.dir}: not a directory"
    # One missing folder is made; a missing parent is more likely a typo than a tree to create.
    if not where.exists() and not where.parent.is_dir():
        return (
            f"--dir {args.dir}: no such directory {where.parent}; stream makes the folder "
            "itself but not its parents"
        )
    existing = next(p for p in (where, *where.parents) if p.exists())
    if not os.access(existing, os.W_OK):
        return f"cannot write to {existing}" + ("" if args.dir else "; choose a --dir")
    need, free = DISK_PER_BYTE * args.size, shutil.disk_usage(existing).free
    if need > free:
        return (
            f"--size {fmt_bytes(args.size)} needs {fmt_bytes(need)} free in {existing} (inputs "
            f"and outputs), which has {fmt_bytes(free)}; lower --size or choose a --dir elsewhere"
        )
    return None


def _missing_extra(distributed: bool) -> str | None:
    """The message for a module of the dask extra that cannot be imported, or ``None``."""
    for module in ("dask.array", "zarr") + (("distributed",) if distributed else ()):
        try:
            importlib.import_module(module)
        except ImportError:
            return (
                f"stream needs {module}, which is not installed: pip install 'numba_onnx_ops[dask]'"
            )
    return None


def _connect(address: str):
    """A ``distributed.Client`` of the scheduler at ``address``; ``ValueError`` for an address
    that cannot be one, ``ConnectionRefusedError`` where nothing listens at a TCP address,
    another ``OSError`` for a scheduler that does not answer in time."""
    from distributed import Client
    from distributed.comm import get_address_host_port, parse_address

    host, port = get_address_host_port(address)  # ValueError: no port, an unknown scheme
    if parse_address(address)[0] == "tcp":
        # A refused connection is an answer, at once: dask's client would try again until its
        # timeout before saying so.
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    # dask's timeout covers the connection, not the handshake after it: a listener that never
    # answers (another service on that port) would hold the client for ever.  So the client is
    # made on a thread of its own, given up (left to the process's exit) past the timeout.
    made: list = []
    maker = threading.Thread(
        target=lambda: made.append(_client_or_error(Client, address)), daemon=True
    )
    maker.start()
    maker.join(CONNECT_TIMEOUT_S + 1)
    if not made:
        raise TimeoutError(f"no answer from {address} within {CONNECT_TIMEOUT_S} s")
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


def _client_or_error(Client, address: str):
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S)
    except Exception as exc:  # (raised again on the caller's thread)
        return exc


def command(args: argparse.Namespace) -> int:
    """Run ``stream``; return the exit status: 0 when the checked blocks agree, 1 when one
    differs, 3 when the dask extra is missing or the scheduler does not answer (usage errors
    exit with 2 through ``args.parser``).

    It says where the data go and about how much before writing any, and at the end how much
    it kept in ``--dir`` or removed with the temporary folder it used without one.
    """
    if problem := usage_problem(args):
        args.parser.error(problem)
    if problem := _missing_extra(bool(args.workers or args.scheduler)):
        print(f"{args.parser.prog}: error: {problem}", file=sys.stderr)
        return 3
    with contextlib.ExitStack() as stack:
        client = None
        if args.scheduler:
            try:
                client = stack.enter_context(_connect(args.scheduler))
            except ValueError as exc:
                args.parser.error(f"--scheduler {args.scheduler}: {exc}")
            except ConnectionRefusedError:
                print(
                    f"{args.parser.prog}: error: nothing listens at {args.scheduler} (the "
                    "connection was refused); is the dask scheduler running, and is the address "
                    "right?",
                    file=sys.stderr,
                )
                return 3
            except OSError:
                print(
                    f"{args.parser.prog}: error: no dask scheduler answered at {args.scheduler} "
                    f"within {CONNECT_TIMEOUT_S} s; is it running, and is the address right?",
                    file=sys.stderr,
                )
                return 3
        elif args.workers:
            from distributed import Client, LocalCluster

            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=args.workers,
                    threads_per_worker=1,
                    memory_limit=args.memory_limit or MEMORY_LIMIT,
                    dashboard_address=None,
                )
            )
            client = stack.enter_context(Client(cluster))
        if args.dir:
            workdir, made = Path(args.dir).absolute(), not os.path.isdir(args.dir)
            workdir.mkdir(exist_ok=True)
            replaced = [name for name in INPUTS + OUTPUTS if (workdir / name).exists()]
            kept = f"{workdir}{' (a new folder)' if made else ''}, kept at the end" + (
                f"; replacing the {', '.join(replaced)} there" if replaced else ""
            )
        else:
            prefix = "numba_onnx_ops-stream-"
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
            kept = f"the temporary folder {workdir}, removed at the end"
        print(
            f"data: about {fmt_bytes(DISK_PER_BYTE * args.size)} (inputs {' and '.join(INPUTS)}, "
            f"outputs {' and '.join(OUTPUTS)}) in {kept}",
            flush=True,
        )
        where = f"workers of {client.scheduler.address}" if client else "threaded scheduler"
        print(
            f"inputs: 2 x {fmt_bytes(args.size)} in {fmt_bytes(min(args.chunk, args.size))} "
            f"chunks; {where}",
            flush=True,
        )
        start = time.perf_counter()
        data = prepare(workdir, args.size, chunk_bytes=args.chunk)
        print(f"made the inputs in {time.perf_counter() - start:.1f} s", flush=True)
        warm(data, client)
        report = run(data, client)
        for name, r in report.items():
            mib = lambda values: ", ".join(f"{v / 2**20:.0f}" for v in values)  # noqa: E731
            print(
                f"{name}: {r['seconds']:.2f} s; resident MiB before {mib(r['rss_before'])}, "
                f"peak {mib(r['peak_rss'])}"
            )
        status = 0
        try:
            check(data)
        except AssertionError as exc:
            print(f"{args.parser.prog}: RESULTS DISAGREE: {exc}", file=sys.stderr)
            status = 1
        else:
            print("first and last row blocks agree with the in-memory calls")
        written = fmt_bytes(_tree_bytes(workdir, INPUTS + OUTPUTS))
    if args.dir:
        print(f"kept {written} in {workdir}: {', '.join(INPUTS + OUTPUTS)}")
    else:
        print(f"removed the temporary folder {workdir} ({written})")
    return status


def _tree_bytes(folder: Path, names) -> int:
    """The bytes of the files under ``folder``'s entries ``names``."""
    return sum(
        (Path(root) / file).stat().st_size
        for name in names
        for root, _, files in os.walk(folder / name)
        for file in files
    )
