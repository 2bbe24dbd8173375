"""``python -m numba_onnx_ops`` as a user meets it, each run in a new process: every argument
checked before any work, a one-line message for each way a command can fail, and an exit
status per kind of failure (0 done, 1 a result disagrees, 2 usage, 3 cannot run here)."""

from __future__ import annotations

import importlib.util
import os
import shlex
import socket
import subprocess
import sys
import time

import pytest

import numba_onnx_ops
from numba_onnx_ops import bench as _bench

PROG = "python -m numba_onnx_ops"
HAS_DASK = all(importlib.util.find_spec(m) for m in ("dask", "distributed", "zarr"))
needs_dask = pytest.mark.skipif(not HAS_DASK, reason="needs the dask extra")

# Runs the command line with the named top-level modules made unimportable, as where they are
# not installed: python -c CODE MODULES -- ARGS...
_WITHOUT = """
import runpy, sys
cut = sys.argv.index("--")
missing, sys.argv = set(sys.argv[1:cut]), ["numba_onnx_ops", *sys.argv[cut + 1:]]
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in missing:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NotInstalled())
runpy.run_module("numba_onnx_ops", run_name="__main__", alter_sys=True)
"""


def cli(*args: str, without: tuple[str, ...] = (), timeout: float = 300, env=None):
    if without:
        cmd = [sys.executable, "-c", _WITHOUT, *without, "--", *args]
    else:
        cmd = [sys.executable, "-m", "numba_onnx_ops", *args]
    env = {**os.environ, **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def error_line(done, command: str) -> str:
    """The one line a failure prints: ``python -m numba_onnx_ops COMMAND: error: ...``."""
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{PROG} {command}: error: "), done.stderr
    return last


def test_version():
    done = cli("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"numba_onnx_ops {numba_onnx_ops.__version__}"


def test_commands_that_run_no_case_leave_ml_dtypes_unimported():
    # Its import takes about a second: only the cases, which make bfloat16 inputs, need it.
    code = (
        "import sys\n"
        "from numba_onnx_ops.__main__ import main\n"
        "assert main(['bench', '--list']) == 0\n"
        "try:\n"
        "    main(['stream', '--help'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0\n"
        "assert 'ml_dtypes' not in sys.modules, 'imported'\n"
        "print('checked')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("command", [[], ["bench"], ["stream"]], ids=["main", "bench", "stream"])
def test_help_gives_the_exit_statuses(command):
    done = cli(*command, "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "exit status: 0 done" in text
    for status in ("1 a result", "2 usage error", "3 the command cannot run here"):
        assert status in text
    assert "141 standard output was closed before the command ended (as by | head)" in text


def cli_with_stdout_closed(*args: str):
    """Runs the command line with a standard output nobody reads (the reader is gone before
    the command starts, as after ``| head`` has had its lines)."""
    read, write = os.pipe()
    os.close(read)
    try:
        cmd = [sys.executable, "-m", "numba_onnx_ops", *args]
        return subprocess.run(cmd, stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "--list"],
        ["bench", "--size", "tiny", "--cases", "matmul-f32-4x4", "--csv", "{tmp}/b.csv"],
    ],
    ids=["list", "run"],
)
def test_a_closed_stdout_ends_the_command_quietly(tmp_path, args):
    done = cli_with_stdout_closed(*(a.format(tmp=tmp_path) for a in args))
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    if "--csv" in args:  # the files do not depend on the table being read
        assert (tmp_path / "b.csv").read_text().startswith("case,")
        assert f"wrote {tmp_path}/b.csv" in done.stderr


# --------------------------------------------------------------------------------------------
# stream


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--size", "foo"], "argument --size: invalid size 'foo': give bytes, or a number"),
        (["--size=-5MiB"], "invalid size '-5MiB'"),
        (["--size", "0"], "--size 0 B is below the least, 1 MiB"),
        (["--chunk", "1"], "--chunk 1 B is below the least, 1 MiB"),
        (["--workers", "-1"], "argument --workers: -1 is out of range: 0 (no worker processes)"),
        (["--workers", "100000"], "argument --workers: 100000 is out of range"),
        (["--workers", "two"], "argument --workers: invalid count 'two'"),
        (["--memory-limit", "2GiB"], "--memory-limit applies to the worker processes of --workers"),
        (["--workers", "1", "--scheduler", "tcp://127.0.0.1:1"], "not allowed with argument"),
        (["--workers", "1", "--memory-limit", "300MiB"], "--memory-limit 300 MiB is too small"),
        (["--workers", "1", "--chunk", "128MiB"], "--memory-limit 1 GiB (the default) is too"),
        (["--size", "1000000TiB"], "--size 1e+06 TiB needs 3.5e+06 TiB free in"),
        (["--dir", __file__], "not a directory"),
        (["--dir", "{tmp}/typo/data"], "--dir {tmp}/typo/data: no such directory {tmp}/typo; "),
    ],
)
def test_stream_arguments_are_checked_before_any_work(tmp_path, args, message):
    args, message = [a.format(tmp=tmp_path) for a in args], message.format(tmp=tmp_path)
    start = time.perf_counter()
    done = cli("stream", *args, timeout=60)
    assert done.returncode == 2
    line = error_line(done, "stream")
    assert message in line
    assert "_size" not in done.stderr and done.stdout == ""  # nothing was made or run
    assert list(tmp_path.iterdir()) == []
    assert time.perf_counter() - start < 60


def test_stream_sizes_name_their_formats():
    text = " ".join(cli("stream", "--size", "foo").stderr.split())
    assert "512MiB" in text and "1.5G" in text and "powers of 1024" in text


@needs_dask
def test_stream_bad_scheduler_address_is_a_usage_error():
    done = cli("stream", "--size", "1MiB", "--scheduler", "nohost")
    assert done.returncode == 2
    assert "--scheduler nohost: missing port number" in error_line(done, "stream")


def _stream_from(address: str) -> tuple[str, float]:
    """The one line of a ``stream --scheduler address`` that cannot run (exit status 3), and
    the seconds it took."""
    start = time.perf_counter()
    done = cli("stream", "--size", "1MiB", "--scheduler", address, timeout=60)
    seconds = time.perf_counter() - start
    assert done.returncode == 3
    assert len(done.stderr.strip().splitlines()) == 1
    return error_line(done, "stream"), seconds


@needs_dask
def test_stream_refused_scheduler_fails_at_once_in_one_line():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    line, seconds = _stream_from(address)
    assert f"nothing listens at {address} (the connection was refused)" in line
    assert seconds < 8  # (a subprocess that imports dask; no wait for an answer)


@needs_dask
def test_stream_connects_to_a_running_scheduler():
    from distributed import LocalCluster

    from numba_onnx_ops.integrations.zarr_stream import _connect

    with LocalCluster(
        n_workers=1, processes=False, protocol="tcp://", dashboard_address=None
    ) as cluster:
        with _connect(cluster.scheduler_address) as client:
            assert client.submit(pow, 2, 10).result() == 1024


@needs_dask
def test_stream_silent_scheduler_fails_after_its_timeout_in_one_line():
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        line, seconds = _stream_from(address)
    assert f"no dask scheduler answered at {address} within 10 s" in line
    assert 10 <= seconds < 25


@pytest.mark.parametrize("missing", ["dask", "zarr"])
def test_stream_without_the_dask_extra_says_what_to_install(missing):
    done = cli("stream", "--size", "1MiB", without=(missing,))
    assert done.returncode == 3
    line = error_line(done, "stream")
    assert f"stream needs {missing}" in line and "pip install 'numba_onnx_ops[dask]'" in line
    assert cli("stream", "--help", without=(missing,)).returncode == 0


def _tree_size(folder) -> str:
    from numba_onnx_ops.integrations.zarr_stream import fmt_bytes

    return fmt_bytes(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()))


@needs_dask
def test_stream_runs_with_valid_arguments_and_keeps_its_data_in_dir(tmp_path):
    """--dir makes its last folder, and keeps the data there: named, with their size, before any
    is written and at the end."""
    data = tmp_path / "data"
    done = cli("stream", "--size", "1MiB", "--chunk", "1MiB", "--dir", str(data))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "data: about 3.5 MiB (inputs x.zarr and a.zarr, outputs y.zarr and c.zarr) in "
        f"{data} (a new folder), kept at the end"
    )
    assert "inputs: 2 x 1 MiB in 1 MiB chunks; threaded scheduler" in lines[1]
    assert "first and last row blocks agree" in done.stdout
    assert sorted(p.name for p in data.iterdir()) == ["a.zarr", "c.zarr", "x.zarr", "y.zarr"]
    assert lines[-1] == f"kept {_tree_size(data)} in {data}: x.zarr, a.zarr, y.zarr, c.zarr"


@needs_dask
def test_stream_without_dir_removes_its_temporary_folder(tmp_path):
    done = cli("stream", "--size", "1MiB", "--chunk", "1MiB", env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    first, last = done.stdout.splitlines()[0], done.stdout.splitlines()[-1]
    prefix = "data: about 3.5 MiB (inputs x.zarr and a.zarr, outputs y.zarr and c.zarr) in the "
    assert first.startswith(prefix + f"temporary folder {tmp_path}/"), first
    assert first.endswith(", removed at the end")
    folder = first.removeprefix(prefix + "temporary folder ").removesuffix(", removed at the end")
    assert last.startswith(f"removed the temporary folder {folder} (3.5"), last
    assert not os.path.exists(folder)


@needs_dask
def test_stream_reports_a_disagreement_with_status_1(tmp_path, monkeypatch, capsys):
    from numba_onnx_ops.__main__ import main
    from numba_onnx_ops.integrations import zarr_stream

    def wrong(data):
        raise AssertionError("rows 0:64 differ from the in-memory call")

    monkeypatch.setattr(zarr_stream, "check", wrong)
    assert main(["stream", "--size", "1MiB", "--chunk", "1MiB", "--dir", str(tmp_path)]) == 1
    assert "RESULTS DISAGREE: rows 0:64 differ" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# bench

BENCH = ("bench", "--quick", "--cases", "matmul-f32-4x4")


@pytest.mark.parametrize(
    ("option", "path", "message"),
    [
        ("--plot", "/nonexistent/x.png", "no such directory: /nonexistent"),
        ("--csv", "/nonexistent/x.csv", "no such directory: /nonexistent"),
        ("--json", "{tmp}", "is a directory"),
        ("--plot", "{tmp}/x.xyz", "matplotlib cannot write .xyz files; use one of"),
    ],
)
def test_bench_outputs_are_checked_before_the_run(tmp_path, option, path, message):
    path = path.format(tmp=tmp_path)
    start = time.perf_counter()
    done = cli(*BENCH, option, path)
    assert done.returncode == 2
    assert f"{option} {path}: {message}" in error_line(done, "bench")
    assert "[1/1]" not in done.stderr  # no case ran
    assert time.perf_counter() - start < 60


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--cases", "first-pow-f32-e3.7"],
            "--cases first-pow-f32-e3.7: first-pow-f32-e3.7 is a first-call target: add --targets",
        ),
        (
            ["--quick", "--cases", "matmul-f32-4x4", "first-matmul-i32"],
            "--cases first-matmul-i32: first-matmul-i32 is a first-call target: add --targets",
        ),
        (
            ["--size", "tiny", "--targets", "--cases", "first-matmul"],
            "first-matmul-i32, first-matmul-i32-packed, first-matmul-f32-batch, first-matmul-f32 "
            "are first-call targets: timed at --size quick or full only",
        ),
        (["--list", "--cases", "first-pow"], "are first-call targets: add --targets"),
        (["--cases", "no-such-case", "pow-f16"], "no case matches 'no-such-case'; --list names"),
    ],
)
def test_bench_cases_that_would_run_nothing_are_usage_errors(args, message):
    done = cli("bench", *args)
    assert done.returncode == 2
    assert message in error_line(done, "bench")
    assert "[1/" not in done.stderr and done.stdout == ""  # nothing ran


def test_bench_list_aligns_its_columns_to_the_longest_entries():
    done = cli("bench", "--targets", "--list")
    assert done.returncode == 0, done.stderr
    labels = {case.name: case.label() for case in _bench.CASES}
    labels |= {first.name: f"first call, {first.label}" for first in _bench.FIRST_CALLS}
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(labels)
    starts = {line.index("  " + labels[line.split()[0]]) for line in lines}
    targets = {line.index("  target ") for line in lines}
    assert len(starts) == 1 and len(targets) == 1, (starts, targets)


def test_bench_help_says_how_to_get_the_optional_torch_peer():
    text = " ".join(cli("bench", "--help").stdout.split())
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in text
    assert "a plain pip install torch can pull a CUDA build of several GB" in text
    assert "runs only when named: --cases gemm" in text


def test_bench_without_torch_has_no_torch_column():
    done = cli("bench", "--size", "tiny", "--cases", "matmul-f32-4x4", without=("torch",))
    assert done.returncode == 0, done.stderr
    (header,) = [line for line in done.stdout.splitlines() if line.startswith("| case ")]
    assert "| onnxruntime " in header and "torch" not in header


def test_bench_list_names_the_groups_cases_and_how_to_run_them():
    done = cli("bench", "--list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    gemm = [line for line in lines if line.startswith("gemm-")]
    assert len(gemm) == 34 and all(line.endswith("(group gemm: --cases gemm)") for line in gemm)
    assert not any("group" in line for line in lines if not line.startswith("gemm-"))
    assert "gemm-f32-1024-1t" in cli("bench", "--list", "--cases", "gemm-f32-1024").stdout


def test_bench_names_the_command_that_runs_a_row_again(monkeypatch, capsys):
    """The report ends with the command that runs one of its rows again, with the flags the row
    needs (--targets for a first call), and that command runs that row alone, even where other
    names contain its name."""
    from numba_onnx_ops.__main__ import main

    ran = []  # nothing is timed: rows, first calls and limits are made up
    ok = {_bench.OURS: "ok", _bench.NUMPY: "ok"}

    def rows(cases, size, contenders, progress):
        ran.extend(case.name for case in cases)
        return [_bench.Row(case, size, times=dict.fromkeys(ok, 1e-3), status=ok) for case in cases]

    def first_calls(firsts, progress):
        ran.extend(first.name for first in firsts)
        return {first: [1.0, 1.0, 1.0] for first in firsts}

    copy = {"bytes": 4e7, "seconds": 3e-3, "gbps": 27.0}
    monkeypatch.setattr(_bench, "measure_limits", lambda: {"fma_peak": None, "copy": copy})
    monkeypatch.setattr(_bench, "run_comparison", rows)
    monkeypatch.setattr(_bench, "run_spreads", lambda rows, progress: {})
    monkeypatch.setattr(_bench, "run_first_calls", first_calls)
    names = ["pow-f32-e3.7", "call-pow16-f32-e2", "first-pow-f32-e3.7"]
    assert main(["bench", "--quick", "--targets", "--cases", *names]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("one row again: `")]
    command = shlex.split(line.split("`")[1])
    assert command[:4] == ["python", "-m", "numba_onnx_ops", "bench"] and command[-1] == "NAME"
    assert "first call's" in line
    for name in names:
        assert name in out
        ran.clear()
        assert main([*command[3:-1], name]) == 0
        assert ran == [name]


def test_bench_plot_without_matplotlib_cannot_run(tmp_path):
    done = cli(*BENCH, "--plot", str(tmp_path / "x.png"), without=("matplotlib",))
    assert done.returncode == 3
    assert "pip install 'numba_onnx_ops[bench]'" in error_line(done, "bench")
    assert "[1/1]" not in done.stderr


def test_bench_says_what_numba_did_on_first_calls(tmp_path):
    """In a new numba cache our first call compiles; in the next process it loads from there."""
    cache = {"NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    # int32: a product of ours (numpy's BLAS takes some small float products); tiny: what
    # numba did is reported at every size, and this one times the fewest rounds
    bench = ("bench", "--size", "tiny", "--cases", "matmul-i32-512")
    first, second = (cli(*bench, env=cache) for _ in range(2))
    for done in (first, second):
        assert done.returncode == 0, done.stderr
        assert "\n1 case in " in done.stderr and "1 cases" not in done.stderr
        assert "includes compiling" not in done.stderr
    assert "(numba_onnx_ops: compiled " in first.stderr
    assert "(numba_onnx_ops: kernels loaded from numba's on-disk cache)" in second.stderr
