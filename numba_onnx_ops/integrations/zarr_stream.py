"""Larger than memory: zarr to zarr through Pow and MatMul on dask, with bounded memory.

``python -m numba_onnx_ops stream`` runs it (see ``--help``).  The pipeline itself is a few
lines of user code (``_pow_stage`` and ``_matmul_stage``); the rest makes the inputs, checks
blocks of the outputs against the in-memory calls and reports the peak memory, read from the
kernel's high-water mark of each process that computed (reset before each stage).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np

MATMUL_K = 512  # A's columns (the contraction), one chunk
MATMUL_N = 256  # B's columns: B is a small numpy operand, passed whole to every task


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


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def add_parser(commands) -> None:
    """The ``stream`` command of ``python -m numba_onnx_ops``."""
    p = commands.add_parser(
        "stream",
        help="stream zarr to zarr through Pow and MatMul on dask (larger than memory)",
        description="Make a float16 and an int32 zarr input of SIZE each, stream "
        "pow(x, 3.7) and matmul(a, b) (b: a 512x256 int32 numpy array) into zarr outputs, "
        "check the first and last row blocks against the in-memory calls, and report each "
        "stage's time and the peak resident memory of every process that computed. Needs the "
        "dask extra.",
    )
    p.add_argument("--size", default="1GiB", type=_size, help="bytes per input (default 1GiB)")
    p.add_argument("--chunk", default="16MiB", type=_size, help="bytes per row chunk")
    p.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="run on a LocalCluster of this many single-threaded worker processes "
        "(default 0: dask's threaded scheduler in this process)",
    )
    p.add_argument(
        "--memory-limit", default="1GiB", help="memory per worker process with --workers"
    )
    p.add_argument("--scheduler", help="address of a running dask.distributed scheduler")


def command(args) -> int:
    import contextlib
    import tempfile

    with contextlib.ExitStack() as stack:
        workdir = args.dir or stack.enter_context(tempfile.TemporaryDirectory())
        client = None
        if args.scheduler or args.workers:
            from distributed import Client, LocalCluster

            if args.scheduler:
                client = stack.enter_context(Client(args.scheduler))
            else:
                cluster = stack.enter_context(
                    LocalCluster(
                        n_workers=args.workers,
                        threads_per_worker=1,
                        memory_limit=args.memory_limit,
                        dashboard_address=None,
                    )
                )
                client = stack.enter_context(Client(cluster))
        where = f"workers of {client.scheduler.address}" if client else "threaded scheduler"
        print(
            f"inputs: 2 x {args.size / 2**30:.3g} GiB in {args.chunk / 2**20:.3g} MiB chunks; "
            f"{where}",
            flush=True,
        )
        start = time.perf_counter()
        data = prepare(workdir, args.size, chunk_bytes=args.chunk)
        print(f"made the inputs in {time.perf_counter() - start:.1f} s", flush=True)
        warm(data, client)
        report = run(data, client)
        check(data)
        for name, r in report.items():
            mib = lambda values: ", ".join(f"{v / 2**20:.0f}" for v in values)  # noqa: E731
            print(
                f"{name}: {r['seconds']:.2f} s; resident MiB before {mib(r['rss_before'])}, "
                f"peak {mib(r['peak_rss'])}"
            )
        print("first and last row blocks agree with the in-memory calls")
    return 0
