"""Command line: ``python -m numba_onnx_ops [bench ...]``.

With no command it runs the main job: a short demonstration of both operators followed by a
short peer comparison (well under a minute, compilation included).  ``bench`` runs the full
comparison against numpy, onnxruntime and, where installed, PyTorch; see
``python -m numba_onnx_ops bench --help``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence

import numpy as np

from . import __version__, matmul, pow, resolve_version
from . import bench as _bench
from .integrations import zarr_stream as _stream

# Exit statuses of every command.  A closed standard output takes the status a shell gives a
# program that SIGPIPE ended (128 + 13), as `yes | head` does.
OK, DISAGREE, USAGE, CANNOT_RUN, STDOUT_CLOSED = 0, 1, 2, 3, 141
EXIT_STATUS = (
    f"exit status: {OK} done, every result checked agrees; {DISAGREE} a result of "
    f"numba_onnx_ops disagrees with the reference; {USAGE} usage error: a bad option or value, "
    f"or an output file that cannot be written (checked before anything runs); {CANNOT_RUN} "
    "the command cannot run here: an optional extra is not installed (matplotlib for --plot, "
    "dask for stream), the dask scheduler does not answer, or writing an output failed; "
    f"{STDOUT_CLOSED} standard output was closed before the command ended (as by | head): it "
    "stops there, quietly"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (see ``EXIT_STATUS``)."""
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # a closed stdout shows here, not as a warning at exit
    except BrokenPipeError:
        # Python's documented way out: whatever is still buffered for stdout, and the flush at
        # exit, go to devnull instead of raising again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return STDOUT_CLOSED


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "bench":
        return _bench_command(args.parser, args, "python -m numba_onnx_ops " + shlex.join(argv))
    if args.command == "stream":
        return _stream.command(args)
    return demo()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m numba_onnx_ops",
        description="Without a command: a short demonstration of MatMul and Pow and a short "
        "peer comparison (well under a minute).",
        epilog=EXIT_STATUS,
    )
    parser.add_argument("--version", action="version", version=f"numba_onnx_ops {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench = commands.add_parser(
        "bench",
        help="compare the speed with numpy, onnxruntime and PyTorch",
        description="Time numba_onnx_ops, numpy (also with a float32 upcast for the half types), "
        "onnxruntime (when installed) and PyTorch (torch.matmul, torch.pow; when installed, "
        f"never by this package: {_bench.TORCH_INSTALL}) side by side on MatMul and Pow cases "
        "and small models (also in onnx's ReferenceEvaluator, against the evaluator alone), "
        "every contender on the same threads: results are checked to agree first, then the "
        "contenders are timed interleaved; the table gives medians, the spread of each (± half "
        "the interquartile range of its samples) and speed-up = best peer's median / ours. The "
        "GEMM group, float products of inference shapes on 1 and 2 threads with their GFLOP/s "
        "beside the machine's FMA peak, runs only when named: --cases gemm. The machine's "
        "limits, measured before and after the cases, come with a warning when they show that "
        "other programs took the machine meanwhile. Progress goes to stderr, the table to "
        "stdout.",
        epilog=EXIT_STATUS,
    )
    size = bench.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        action="store_const",
        const="quick",
        dest="size",
        help="fewer rounds, 256x256 instead of 1024x1024 for the half-type products "
        "(numpy's take seconds there) and a batch of 64 instead of 1024 for the largest "
        "models; same as --size quick",
    )
    size.add_argument(
        "--size",
        choices=_bench.SIZES,
        help="full (the cases' own shapes; default), quick, or tiny (every dimension cut to "
        f"{_bench.TINY_DIM}: checks that every case runs; its times mean nothing)",
    )
    bench.add_argument(
        "--targets",
        action="store_true",
        help="also show the speed-up each case aims for and whether this run reached it, and "
        "time first calls of some kernels in fresh processes with an empty numba cache "
        "against their limits (for developers of the library)",
    )
    bench.add_argument(
        "--cases",
        nargs="+",
        metavar="PATTERN",
        help="run only the cases named, or whose name matches a glob or contains the text "
        "(e.g. 'matmul-*' or pow-f16; gemm: the GEMM group, left out otherwise; '*': every "
        "case); --list shows the names (first-call targets: with --targets)",
    )
    bench.add_argument("--list", action="store_true", help="list the cases and exit")
    # size: both --quick and --size write it; parser: usage errors show the bench command's usage
    bench.set_defaults(size="full", parser=bench)
    bench.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
    bench.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    bench.add_argument(
        "--plot", metavar="FILE", help="also draw a bar chart to this PNG (needs matplotlib)"
    )
    _stream.add_parser(commands, epilog=EXIT_STATUS)
    return parser


def _cannot_run(parser: argparse.ArgumentParser, problem: str) -> int:
    print(f"{parser.prog}: error: {problem}", file=sys.stderr)
    return CANNOT_RUN


def _bench_command(parser: argparse.ArgumentParser, args: argparse.Namespace, command: str) -> int:
    timed = args.size != "tiny"  # tiny times mean nothing, nor would the limits
    # First calls are timed only for --targets, and never at the tiny size (they are listed).
    times_first_calls = args.targets and (timed or args.list)
    try:
        cases, first_calls_selected = _bench.select(args.cases)
    except ValueError as exc:
        parser.error(str(exc))
    if not times_first_calls:
        first_calls_selected = []
        for pattern, names in _bench.first_calls_only(args.cases).items():
            why = "timed at --size quick or full only" if args.targets else "add --targets"
            what = "is a first-call target" if len(names) == 1 else "are first-call targets"
            parser.error(f"--cases {pattern}: {', '.join(names)} {what}: {why}")
    if args.list:
        listed = cases if args.cases else _bench.CASES  # the groups too: all there is to name
        lines = [(c.name, c.label(), _list_notes(c, args.targets)) for c in listed]
        lines += [  # (first-call targets are listed with --targets only)
            (f.name, f"first call, {f.label}", f"target <= {f.limit:g} s")
            for f in first_calls_selected
        ]
        name_width = max(len(name) for name, _, _ in lines)
        label_width = max(len(label) for _, label, _ in lines)
        for name, label, notes in lines:
            print(f"{name:{name_width}}  {label:{label_width}}  {notes}".rstrip())
        return OK
    # Every output is checked now, not after minutes of timing.
    for option, path in (("--csv", args.csv), ("--json", args.json), ("--plot", args.plot)):
        if path and (problem := _bench.output_problem(path)):
            parser.error(f"{option} {path}: {problem}")
    if args.plot:
        if problem := _bench.check_plot_available():
            return _cannot_run(parser, problem)
        if problem := _bench.plot_path_problem(args.plot):
            parser.error(f"--plot {args.plot}: {problem}")
    env = _bench.environment()
    say = _bench.stderr_progress
    say(_bench.environment_line(env))
    if env["OPENBLAS_CORETYPE"]:
        say(
            f"note: OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']} is set, which can slow numpy's "
            "BLAS; for a fair comparison unset it (and OPENBLAS_L2_SIZE) for this command"
        )
    if timed:
        say("measuring the machine's limits before the cases")
        env["limits_before"] = _bench.measure_limits()
    start = time.perf_counter()
    contenders = _bench.available_contenders()
    rows = _bench.run_comparison(cases, args.size, contenders, progress=say)
    spreads, first_calls = {}, {}
    if args.targets and timed:
        spreads = _bench.run_spreads(rows, progress=say)
        first_calls = _bench.run_first_calls(first_calls_selected, progress=say)
    warnings = []
    if timed:
        say("measuring the machine's limits after the cases")
        env["limits"] = _bench.measure_limits()
        warnings = _bench.busy_signs(env["limits_before"], env["limits"])
    # The files first: a table that cannot be printed (stdout closed) does not lose them.
    failure = None
    try:
        if args.csv:
            _bench.write_csv(rows, args.csv, targets=args.targets)
            say(f"wrote {args.csv}")
        if args.json:
            _bench.write_json(
                rows,
                args.json,
                env,
                targets=args.targets,
                spreads=spreads,
                first_calls=first_calls,
                warnings=warnings,
            )
            say(f"wrote {args.json}")
        if args.plot:
            _bench.plot(rows, args.plot, env, targets=args.targets, warnings=warnings)
            say(f"wrote {args.plot}")
    except OSError as exc:
        failure = f"could not write {exc.filename}: {exc.strerror}"
    print(f"\n## numba_onnx_ops peer comparison ({args.size} size)\n")
    print(_bench.environment_line(env))
    if timed:
        print(_bench.limits_line(env["limits_before"], "before the cases"))
        print(_bench.limits_line(env["limits"], "after the cases"))
    if warnings:
        print(_busy_warning(warnings))
    print(f"speed-up = best peer's median / ours (> 1: numba_onnx_ops is faster); `{command}`")
    print()
    if rows:  # (none when the patterns name first-call targets only)
        print(_bench.format_table(rows, contenders, targets=args.targets))
    limits = [env["limits_before"], env["limits"]] if timed else []
    if gemm := _bench.format_gflops_table(rows, limits, contenders):
        print(f"\nGEMM rows, GFLOP/s\n\n{gemm}")
    for line in _bench.spread_lines(spreads) + _bench.first_call_lines(first_calls):
        print(line)
    where = "the row's case" + (", or a first call's, in parentheses" if first_calls else "")
    print(f"\none row again: `{_rerun_command(args, 'NAME')}` (NAME: {where})")
    say(f"\n{_bench.plural(len(rows), 'case')} in {time.perf_counter() - start:.0f} s")
    if warnings:  # again where the progress goes, in case the table goes to a file
        say(_busy_warning(warnings))
    if failure:
        return _cannot_run(parser, failure)
    return OK if all(row.ours_ok or row.too_few_threads for row in rows) else DISAGREE


def _list_notes(case: _bench.Case, targets: bool) -> str:
    """The last column of ``--list``: the target (with ``--targets``), and the group that
    leaves the case out of a run without ``--cases``."""
    notes = [f"target >= {case.target:.3g}"] if targets else []
    if case.group:
        notes.append(f"(group {case.group}: --cases {case.group})")
    return "  ".join(notes)


def _rerun_command(args: argparse.Namespace, name: str) -> str:
    """The command that runs the row ``name`` of this run again, as this run did: its size,
    and ``--targets`` (which a first-call row needs)."""
    size = {"full": [], "quick": ["--quick"], "tiny": ["--size", "tiny"]}[args.size]
    targets = ["--targets"] if args.targets else []
    return shlex.join(["python", "-m", "numba_onnx_ops", "bench", *size, *targets, "--cases", name])


def _busy_warning(signs: Sequence[str]) -> str:
    return (
        "WARNING: the machine looks busy, so the times and speed-ups of this run may be far off: "
        + "; ".join(signs)
        + ". Rerun with the machine otherwise idle."
    )


def demo() -> int:
    """The main job: both operators on small inputs, then the short comparison."""
    start = time.perf_counter()
    print("numba_onnx_ops: the ONNX operators MatMul and Pow as numba-compiled kernels")
    print(_bench.environment_line(_bench.environment()))
    print("(a first call per dtype and path compiles its kernels, or loads them from numba's")
    print(" on-disk cache where an earlier run compiled them)\n")
    np.set_printoptions(precision=4, suppress=True)
    ok = True
    # The examples use the dtypes of the comparison below, so they compile nothing extra but
    # pow(int32, int64).

    print(f"1. MatMul (opset 21 runs MatMul-{resolve_version('MatMul', 21)}; numpy.matmul rules)")
    a = np.array([[1, 2], [3, 4]], np.int32)
    b = np.array([[5, 6], [-7, 2**31 - 1]], np.int32)
    ok &= _show("matmul(a, b)  int32, exact modulo 2**32", lambda: matmul(a, b), a @ b)
    s = np.arange(12, dtype=np.float32).reshape(2, 2, 3) / 4
    t = np.array([[1, 0], [0, 1], [1, -1]], np.float32)
    ok &= _show("matmul(s, t)  float32 (2,2,3) @ (3,2): a batch", lambda: matmul(s, t), s @ t)

    print(f"\n2. Pow (opset 11 runs Pow-{resolve_version('Pow', 11)}; the newest is Pow-15)")
    x = np.array([0.5, 2.0, 3.0, 10.0], np.float32)
    y = np.float32(2.5)
    ok &= _show("pow(x, np.float32(2.5))  float32", lambda: pow(x, y), x**y, exact=False)
    n = np.array([2, -3, 10, 1000], np.int32)
    ok &= _show("pow(n, 3)  int32 base, Python int exponent: exact", lambda: pow(n, 3), n**3)
    m = np.arange(6, dtype=np.float32).reshape(2, 3)
    e = np.array([1.0, 2.0, 0.5], np.float32)
    ok &= _show(
        "pow(m, e, opset=1, broadcast=1)  Pow-1's legacy broadcast",
        lambda: pow(m, e, opset=1, broadcast=1),
        m**e,
        exact=False,
    )
    h = np.array([0.1, 1.5, 100.0, 300.0], np.float16)
    two = np.float16(2)
    with np.errstate(over="ignore"):
        expected = (h.astype(np.float32) ** 2).astype(np.float16)
    ok &= _show(
        "pow(h, np.float16(2))  float16, computed in float32 (300**2 overflows to inf)",
        lambda: pow(h, two),
        expected,
    )

    print("\n3. Short peer comparison (python -m numba_onnx_ops bench runs all the cases)")
    cases = _bench.select_cases(list(_bench.DEMO_CASES))
    contenders = _bench.MAIN_CONTENDERS
    rows = _bench.run_comparison(cases, "quick", contenders, lambda msg: print(msg, flush=True))
    print()
    print(_bench.format_table(rows, contenders))
    ok &= all(row.ours_ok for row in rows)
    print(f"\ndone in {time.perf_counter() - start:.1f} s" + ("" if ok else "; RESULTS DISAGREE"))
    return OK if ok else DISAGREE


def _show(what: str, call, expected: np.ndarray, *, exact: bool = True) -> bool:
    with _bench.numba_work() as work:
        t0 = time.perf_counter()
        got = call()
        seconds = time.perf_counter() - t0
    if exact:
        agree = got.dtype == expected.dtype and np.array_equal(got, expected)
    else:
        agree = got.dtype == expected.dtype and np.allclose(
            got.astype(np.float64), expected.astype(np.float64), rtol=1e-3, atol=1e-3
        )
    result = np.array2string(got, separator=", ").replace("\n", "")
    print(f"   {what}\n     = {result}")
    print(
        f"     numpy {'agrees' if agree else 'DISAGREES'}; first call {seconds:.2f} s "
        f"({_bench.fmt_numba_work(work)})"
    )
    return bool(agree)


if __name__ == "__main__":
    sys.exit(main())
