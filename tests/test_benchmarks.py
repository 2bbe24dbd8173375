"""The benchmarks stay alive: every asv benchmark runs once over the full cartesian product of its
parameters at a tiny size, and the peer comparison runs end to end (and catches wrong results)."""

from __future__ import annotations

import csv
import inspect
import itertools
import json
import math
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from oracles import pow_float_exact, round_to_format

from numba_onnx_ops import bench as _bench
from numba_onnx_ops.__main__ import _parser, main
from numba_onnx_ops.bench import runner

# The asv suite is the top-level benchmarks/ package, next to tests/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import common, matmul, percall, power, scaleout  # noqa: E402
from benchmarks import compile as compile_bench  # noqa: E402

PREFIXES = ("time_", "timeraw_", "track_", "mem_", "peakmem_")
MODULES = (matmul, power, compile_bench, scaleout, percall)


def _classes(module) -> list[type]:
    return [
        cls
        for cls in vars(module).values()
        if inspect.isclass(cls)
        and cls.__module__ == module.__name__
        and any(name.startswith(PREFIXES) for name in dir(cls))
    ]


def _methods(cls: type) -> list[str]:
    return [name for name in dir(cls) if name.startswith(PREFIXES)]


def _grid(cls: type) -> list[tuple]:
    params = getattr(cls, "params", [])
    if params and not isinstance(params[0], list | tuple):
        params = [params]  # asv's shorthand for a single parameter
    return list(itertools.product(*params))


CLASSES = [cls for module in MODULES for cls in _classes(module)]
IN_PROCESS = [cls for cls in CLASSES if not any(m.startswith("timeraw_") for m in _methods(cls))]
TIMERAW = [cls for cls in CLASSES if cls not in IN_PROCESS]


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    monkeypatch.setattr(common, "TINY", True)


_FIRST_CALL_ROWS = dict(compile_bench.FIRST_CALLS) | {
    first.name: (first.setup, first.call) for first in _bench.FIRST_CALLS
}


@pytest.mark.parametrize("name", list(_FIRST_CALL_ROWS))
def test_first_call_rows_time_a_kernel(name, launches):
    """Every first-call row (asv's and the comparison's targets) launches the package's own
    kernels (a row that went to numpy's BLAS would time numpy, not a compilation)."""
    inputs, call = _FIRST_CALL_ROWS[name]
    namespace: dict = {}
    exec(compile_bench._IMPORTS + inputs, namespace)
    eval(call, namespace)
    assert launches and "blas" not in launches, launches


def test_suite_has_a_class_per_kind_of_call():
    assert {cls.__name__ for cls in CLASSES} >= {
        "MatMulSquare",
        "MatMulBatched",
        "MatMulVector",
        "MatMulSmall",
        "PowScalarExponent",
        "PowBroadcast",
        "PowTypes",
        "PowSmall",
        "Compile",
        "PowPerCall",
        "MatMulPerCall",
        "ModelMatMulPowMatMul",
        "PowHereOrPool",
        "MatMulHereOrPool",
    }
    for cls in CLASSES:
        if getattr(cls, "params", None):
            assert len(cls.param_names) == len(_grid(cls)[0]), cls.__name__


def test_grids_cover_every_dtype_the_operators_allow():
    import numba_onnx_ops

    def names(dtypes):
        return {np.dtype(d).name for d in dtypes}

    assert set(common.MATMUL_DTYPES) == names(numba_onnx_ops.MATMUL_TYPES[13])
    x_types, y_types = numba_onnx_ops.POW_TYPES[15]
    assert set(common.POW_X_DTYPES) == names(x_types)
    assert set(common.POW_Y_DTYPES) == names(y_types)
    for cls in (matmul.MatMulSquare, matmul.MatMulBatched, matmul.MatMulVector):
        assert set(cls.params[0]) == set(common.MATMUL_DTYPES)
    assert set(power.PowTypes.params[1]) == set(common.POW_Y_DTYPES)


@pytest.mark.parametrize("cls", IN_PROCESS, ids=lambda cls: cls.__name__)
def test_every_benchmark_runs_over_its_full_grid(cls):
    ran = skipped = 0
    grid = _grid(cls)
    for combo in grid:
        bench = cls()
        try:
            bench.setup(*combo)
        except NotImplementedError:  # asv's way to skip a combination
            skipped += 1
            continue
        for name in _methods(cls):
            result = getattr(bench, name)(*combo)
            if name.startswith("track_"):
                assert math.isfinite(result) and result > 0, (name, combo, result)
        if hasattr(bench, "teardown"):  # as asv does: ZarrStream's files go
            bench.teardown(*combo)
        ran += 1
    assert ran + skipped == len(grid) and ran > skipped


@pytest.mark.parametrize("cls", TIMERAW, ids=lambda cls: cls.__name__)
def test_every_timeraw_benchmark_runs_in_a_fresh_process(cls):
    """The code strings run as asv runs them (setup, then the statement), all in one new
    interpreter to keep the test short; warm-cache combinations first, so that later cold ones
    (whose NUMBA_CACHE_DIR comes after numba's import) load kernels instead of compiling."""
    codes = []
    grid = sorted(_grid(cls) or [()], key=lambda combo: "cold" in combo)
    for combo in grid:
        bench = cls()
        if hasattr(bench, "setup"):
            bench.setup(*combo)
        for name in _methods(cls):
            code = getattr(bench, name)(*combo)
            stmt, setup = code if isinstance(code, tuple) else (code, "")
            codes.append(f"{setup}\n{stmt}")
    script = "\n".join(f"exec({code!r}, {{}})" for code in codes)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


# --------------------------------------------------------------------------------------------
# The peer comparison command


def test_bench_command_runs_every_case(tmp_path, capsys):
    files = {ext: tmp_path / f"bench.{ext}" for ext in ("csv", "json", "png")}
    args = ["bench", "--size", "tiny", "--csv", str(files["csv"]), "--json", str(files["json"])]
    plotting = _bench.check_plot_available() is None
    if plotting:
        args += ["--plot", str(files["png"])]
    assert main(args) == 0
    table = capsys.readouterr().out
    for case in _bench.CASES:
        assert f"| {case.name} " in table
    with open(files["csv"]) as f:
        rows = list(csv.DictReader(f))
    assert [row["case"] for row in rows] == [case.name for case in _bench.CASES]
    assert all(row["numba_onnx_ops_status"] == "ok" for row in rows)
    assert all(float(row["numba_onnx_ops_s"]) > 0 and float(row["speed_up"]) > 0 for row in rows)
    data = json.loads(files["json"].read_text())
    assert data["environment"]["threads"] >= 1 and len(data["rows"]) == len(_bench.CASES)
    if plotting:
        assert files["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_command_line_in_a_fresh_process():
    cmd = [sys.executable, "-m", "numba_onnx_ops", "bench", "--quick", "--cases", "matmul-f32-4x4"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| matmul-f32-4x4 " in done.stdout
    assert "[1/1] matmul-f32-4x4" in done.stderr  # progress goes to stderr


@pytest.mark.parametrize(
    ("args", "size"),
    [
        ([], "full"),
        (["--quick"], "quick"),
        (["--size", "tiny"], "tiny"),
        (["--size", "full"], "full"),
    ],
)
def test_bench_size_option(args, size):
    assert _parser().parse_args(["bench", *args]).size == size


def test_bench_command_rejects_unknown_cases(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--cases", "no-such-case", "matmul-f32-102"])
    assert exc.value.code == 2
    assert "no case matches 'no-such-case'; --list names them" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "--cases", "pow-f32-e37"])  # a typo: the names nearest to it follow
    assert "no case matches 'pow-f32-e37'; near: pow-f32-e3.7, " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("features", "int64", "one_thread"),
    [({"avx2", "fma"}, 2.5, 3.0), ({"avx2", "fma", "avx512f"}, 2.5, 1.0),
     ({"avx2", "fma", "avx512f", "avx512dq"}, 4.0, 1.0)],
)  # fmt: skip
def test_targets_that_differ_by_cpu_follow_its_features(monkeypatch, features, int64, one_thread):
    from numba_onnx_ops.bench import cases

    monkeypatch.setattr(cases, "cpu_features", lambda: frozenset(features))
    assert cases._on_cpu(4.0, 2.5, "avx512dq") == int64
    assert cases._on_cpu(1.0, 3.0) == one_thread


def test_cases_hold_this_cpus_targets():
    from numba_onnx_ops.bench import cases

    targets = {case.name: case.target for case in _bench.CASES}
    assert targets["matmul-i64-512"] == cases._on_cpu(4.0, 2.5, "avx512dq")
    assert {targets[f"pow-1t-{t}"] for t in ("f32-e3.7", "f32-same", "f64-e3.7", "f64-same")} == {
        cases._on_cpu(1.0, 3.0)
    }


def test_cases_cover_both_target_tables():
    names = {case.name for case in _bench.CASES}
    assert len(names) == len(_bench.CASES) == 57
    assert set(_bench.DEMO_CASES) <= names
    assert {c.op for c in _bench.CASES} == {"MatMul", "Pow", "Model"}
    assert {c.runtime for c in _bench.CASES if c.op == "Model"} == set(_bench.MODEL_RUNTIMES)
    assert _bench.select_cases(["pow-f16"]) == [
        c
        for c in _bench.CASES
        if c.name in ("pow-f16-e2", "pow-f16-e3.7", "pow-f16-e-1.5", "pow-f16-e0.5")
    ]


@pytest.mark.parametrize(("slowest", "met"), [(1.25, "yes"), (1.35, "no")])
def test_targets_report_the_spread_of_our_times_over_distributions(slowest, met):
    (spread,) = [s for s in _bench.SPREADS if s.cases[0] == "pow-f32-e3.7"]
    medians = dict.fromkeys(spread.cases, 8e-3)
    medians[spread.cases[-1]] = 8e-3 * slowest
    medians[spread.cases[1]] = 8e-3 * 1.1
    (line,) = _bench.spread_lines({spread: medians})
    assert f"slowest / fastest {slowest:.2f}, target <= {spread.limit:g}, met: {met}" in line


def test_spread_cases_are_timed_together(monkeypatch):
    # Cases of one spread target are timed again in the same rounds (a machine busier during
    # one case than during another must not show as a spread); with a case missing, not at all.
    cases = tuple(
        _bench.Case(f"pow-{b}", "Pow", ("float32", "float32"), ((4096,), ()), 1.0, 3.7, bases=b)
        for b in ("near1", "wide")
    )
    spread = _bench.Spread("float32 ^ 3.7", tuple(c.name for c in cases), 1.3)
    quick = _bench.Timing(2, 2, budget_s=0.0, min_sample_s=0.0, settle_s=0.0, min_pause_s=0.0)
    monkeypatch.setattr(runner, "CASES", cases)
    monkeypatch.setattr(runner, "SPREADS", (spread,))
    monkeypatch.setattr(runner, "TIMINGS", {"full": quick})
    ours = _bench.OURS
    rows = [_bench.Row(c, "full", times={ours: 1.0}, status={ours: "ok"}) for c in cases]
    calls = []
    monkeypatch.setattr(runner, "time_interleaved", lambda funcs, *a: calls.append(list(funcs))
                        or {name: [1e-3, 2e-3, 3e-3] for name in funcs})  # fmt: skip
    assert runner.run_spreads(rows) == {spread: dict.fromkeys(spread.cases, 2e-3)}
    assert calls == [list(spread.cases)]  # one interleaved timing of all of them
    assert runner.run_spreads(rows[:1]) == {}


@pytest.mark.parametrize(("times", "met"), [((2.5, 3.2, 2.9), "yes"), ((3.1, 3.2, 2.0), "no")])
def test_targets_report_first_calls_by_their_median(times, met):
    (first,) = _bench.select_first_calls(["first-pow-f32-e3.7"])
    (line,) = _bench.first_call_lines({first: list(times)})
    median = sorted(times)[1]
    assert f"median {median:.2f} s" in line and f"target <= {first.limit:g} s, met: {met}" in line


def test_first_calls_run_in_fresh_processes_with_an_empty_cache(tmp_path):
    """Each run is a new interpreter (no kernel compiled yet) whose numba cache is an empty
    folder of its own, and only the call is timed, not the setup."""
    setup = (
        "import os, numba\n"
        "from numba_onnx_ops.ops.pow import kernels as power\n"
        "assert not power.pow_general.signatures\n"
        "assert numba.config.CACHE_DIR == os.environ['NUMBA_CACHE_DIR']\n"
        "assert not [f for _, _, files in os.walk(numba.config.CACHE_DIR) for f in files]\n"
        "time.sleep(0.6)"
    )
    first = _bench.FirstCall("first-sleep", "a pause", setup, "time.sleep(0.2)", 1.0)
    ((got, times),) = runner.run_first_calls([first], repeat=2).items()
    assert got is first and len(times) == 2
    assert all(0.2 <= t < 0.6 for t in times), times
    _bench.write_json([], tmp_path / "b.json", {}, first_calls={first: times})
    (record,) = json.loads((tmp_path / "b.json").read_text())["first_calls"]
    assert record == {
        "name": "first-sleep", "call": "a pause", "times_s": times, "limit_s": 1.0, "met": True
    }  # fmt: skip
    broken = _bench.FirstCall("first-broken", "a failure", "pass", "1 / 0", 1.0)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        runner.run_first_calls([broken], repeat=1)


def test_first_call_targets_are_selected_by_name():
    names = [f.name for f in _bench.select_first_calls(["first-pow"])]
    assert names == ["first-pow-f32-e3.7", "first-pow-f64-e3.7", "first-pow-f16-f16"]
    assert _bench.select_cases(["first-matmul"]) == []  # matches first calls only: no error
    assert len(_bench.select_first_calls(None)) == len(_bench.FIRST_CALLS) == 6
    with pytest.raises(ValueError, match="no case matches"):
        _bench.select_cases(["first-nothing"])


def test_a_name_selects_its_case_alone():
    # Names that other names contain: pow-f32-e3.7 (first-pow-f32-e3.7), call-pow16-f32-e2
    # (call-pow16-f32-e2-opset15), first-matmul-i32 (first-matmul-i32-packed).
    for name in [c.name for c in _bench.CASES] + [f.name for f in _bench.FIRST_CALLS]:
        cases, firsts = _bench.select_cases([name]), _bench.select_first_calls([name])
        assert [c.name for c in cases] + [f.name for f in firsts] == [name]


# --------------------------------------------------------------------------------------------
# The agreement check catches wrong results


def _case(name: str) -> _bench.Case:
    (case,) = _bench.select_cases([name])
    return case


@pytest.mark.parametrize("name", ["matmul-i32-512", "matmul-f32-256", "matmul-bf16-1024"])
def test_matmul_check_accepts_numpy_and_rejects_a_perturbed_result(name):
    case = _case(name)
    a, b = _bench.make_inputs(case, "tiny")
    good = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
    assert _bench.check(case, a, b, good) is None
    bad = good.copy()
    bad[0, 0] = bad[0, 0] + (1 if a.dtype.kind in "iu" else 0.5)
    assert "1 of" in _bench.check(case, a, b, bad)
    assert "expected" in _bench.check(case, a, b, good.T[:-1])


@pytest.mark.parametrize("name", ["pow-f32-e3.7", "pow-f32-row", "pow-f64-e3.7", "pow-f16-e2"])
def test_pow_check_allows_two_ulps_and_no_more(name):
    case = _case(name)
    x, y = _bench.make_inputs(case, "tiny")
    exact = round_to_format(pow_float_exact(x, y), x.dtype)
    assert _bench.check(case, x, y, exact) is None
    two_up = np.nextafter(np.nextafter(exact, np.inf), np.inf)
    assert _bench.check(case, x, y, two_up) is None
    three_up = np.nextafter(two_up, np.inf)
    assert "beyond 2 ulp" in _bench.check(case, x, y, three_up)


def test_model_check_accepts_the_chains_rounding_and_rejects_a_perturbed_result():
    case = _case("model-f32-b1-w64")
    x, weights = _bench.make_inputs(case, "tiny")
    assert weights.shape == (2, 7, 7)
    # float32 at every step, as a runtime computes it: within the bound
    good = ((x @ weights[0]) ** np.float32(2)) @ weights[1]
    assert good.dtype == np.float32 and _bench.check(case, x, weights, good) is None
    bad = good.copy()
    bad[0, 0] += 0.5
    assert "1 of 7 entries beyond" in _bench.check(case, x, weights, bad)
    assert "expected" in _bench.check(case, x, weights, good.astype(np.float64))


def test_evaluator_cases_time_the_evaluator_with_our_ops_against_it_alone(launches):
    from numba_onnx_ops.bench import contenders

    case = _case("model-eval-f32-b32-w256")
    x, weights = _bench.make_inputs(case, "tiny")
    runs = {}
    for name in _bench.CONTENDERS:
        try:
            func = contenders.FACTORIES[name](case, x, weights)
        except _bench.Unavailable as exc:
            runs[name] = str(exc)
            continue
        launches.clear()
        out = func()
        runs[name] = (_bench.check(case, x, weights, out), list(launches))
    assert runs[_bench.OURS][0] is None and "pow_square" in runs[_bench.OURS][1]
    assert runs[_bench.NUMPY] == (None, [])  # the evaluator alone: none of our kernels
    assert runs[_bench.UPCAST] == runs[_bench.ORT] == "-"
    table = _bench.format_table([_bench.Row(case, "tiny")])
    assert "ReferenceEvaluator |" in table and "numpy is the same evaluator alone" in table


@pytest.mark.parametrize("cls", [percall.PowHereOrPool, percall.MatMulHereOrPool])
def test_here_or_pool_benchmarks_force_the_place_and_restore_the_tuning(cls, launches):
    from numba_onnx_ops import tuning

    names = ("POW_HERE_MAX", "MATMUL_HERE_MAX", "TABLE_USE_MIN")
    saved = {name: getattr(tuning, name) for name in names}
    for combo in _grid(cls):
        bench = cls()
        bench.setup(*combo)
        launches.clear()
        getattr(bench, _methods(cls)[0])(*combo)
        bench.teardown(*combo)
        place = "here" if combo[-1] == "calling thread" else "pool"
        assert launches and set(launches.places) == {place}, (combo, launches.places)
    assert {name: getattr(tuning, name) for name in saved} == saved


def test_per_call_cases_pass_their_opset_and_python_exponent(monkeypatch):
    from numba_onnx_ops.bench import contenders

    calls = []
    monkeypatch.setattr(contenders, "pow", lambda x, y, **kw: calls.append((y, kw)))
    by_name = {case.name: case for case in _bench.CASES}
    for name in ("call-pow16-f32-e3.7-opset15", "call-pow16-f32-e3.7", "pow-f32-e3.7"):
        case = by_name[name]
        contenders.FACTORIES[_bench.OURS](case, *_bench.make_inputs(case, "tiny"))()
    (y0, kw0), (y1, kw1), (y2, kw2) = calls
    assert type(y0) is type(y1) is float and y0 == y1 == float(np.float32(3.7))
    assert (kw0, kw1, kw2) == ({"opset": 15}, {}, {})
    assert isinstance(y2, np.ndarray) and y2.dtype == np.float32
    assert "Python 3.7, opset=15" in by_name["call-pow16-f32-e3.7-opset15"].label()


def test_integer_pow_reference_follows_the_spec():
    x = np.array([2, -3, 0, 1, -1, -1, 5, 0, 2**20], np.int32)
    y = np.array([3, 3, -2, -7, -3, -4, -1, 0, 2], np.int32)
    expected = [8, -27, np.iinfo(np.int32).min, 1, -1, 1, 0, 1, 0]  # 2**40 wraps to 0
    assert _bench.checking._int_pow_reference(x, y).tolist() == expected


def test_timing_interleaves_in_a_balanced_order():
    calls = []
    funcs = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    timing = _bench.Timing(min_rounds=6, max_rounds=6, budget_s=0.0, min_sample_s=0.0, settle_s=0.0)
    samples = _bench.time_interleaved(funcs, dict.fromkeys("abc", 1e-3), timing)
    assert all(len(s) == 6 for s in samples.values())
    rounds = [calls[i : i + 3] for i in range(0, 18, 3)]
    assert all(sorted(r) == list("abc") for r in rounds)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 6])
def test_over_a_cycle_of_rounds_each_contender_follows_each_other_equally_often(count):
    names = [f"c{i}" for i in range(count)]
    cycle = count if count % 2 == 0 else 2 * count
    orders = [_bench.timing.round_order(names, r) for r in range(cycle)]
    assert all(sorted(o) == names for o in orders)
    places = Counter((i, name) for o in orders for i, name in enumerate(o))
    pairs = Counter(pair for o in orders for pair in zip(o, o[1:]))
    assert len(places) == count * count and len(set(places.values())) == 1
    assert len(pairs) == count * (count - 1) and len(set(pairs.values())) <= 1


def test_calls_per_sample_come_from_the_steady_rate_not_a_cold_first_call():
    durations = iter([0.05, 0.002, 0.003, 1.0])

    def func():
        time.sleep(next(durations))

    assert 0.002 <= _bench.steady_call_time(func) < 0.003 + 0.01
    assert next(durations) == 1.0  # three calls, no more
    slow = iter([0.2, 0.2, 0.2])
    assert _bench.steady_call_time(lambda: time.sleep(next(slow)), limit_s=0.3) >= 0.2
    assert next(slow) == 0.2  # stopped once the calls had taken the limit


def test_each_estimate_starts_after_the_pause_a_sample_gets(monkeypatch):
    events = []
    monkeypatch.setattr(
        _bench.timing, "wait_until_idle", lambda limit_s, min_s=0.0: events.append(("wait", min_s))
    )
    funcs = {"a": lambda: events.append("a"), "b": lambda: events.append("b")}
    timing = _bench.TIMINGS["full"]
    estimates = _bench.timing.call_estimates(funcs, timing)
    assert set(estimates) == {"a", "b"}
    pause = ("wait", timing.min_pause_s)
    assert events == [pause, "a", "a", "a", pause, "b", "b", "b"]


def test_the_fma_peak_kernel_computes_every_chain():
    from fractions import Fraction

    from numba_onnx_ops.bench import limits

    if not limits.vector_bits():
        pytest.skip("no AVX2 and FMA here")
    lanes = limits.vector_bits() // 32
    one, _ = limits._peak_kernels(lanes)
    steps = 7
    scale, shift = (Fraction(float(np.float32(v))) for v in (0.999999, 1e-6))

    def to_float32(v: Fraction) -> Fraction:  # round half to even, once (v is normal, > 0)
        quantum = Fraction(2) ** (math.floor(math.log2(v)) - 23)
        return round(v / quantum) * quantum

    total = 0.0
    for chain in range(limits._CHAINS):
        x = Fraction(2 + chain)
        for _ in range(steps):  # a fused multiply-add: one rounding of the exact value
            x = to_float32(x * scale + shift)
        total += lanes * float(x)
    assert one(steps) == pytest.approx(total, rel=1e-12)


def test_machine_limits_line():
    from numba_onnx_ops.bench import limits

    peak = limits.fma_peak(seconds=0.001, runs=1)
    copy = limits.copy_rate(elements=1 << 16, runs=1)
    line = limits.limits_line({"fma_peak": peak, "copy": copy})
    assert "copy of 0 MB" in line and copy["gbps"] > 0
    if peak is not None:
        assert peak["gflops_one_thread"] > 0 and peak["gflops_all_threads"] > 0
        assert "float32 FMA peak" in line


def test_measured_sizes_pause_at_least_50_ms_before_each_sample():
    # onnxruntime's pool threads spin 10-50 ms after a run and take the cores from whoever runs
    # next: every sample of a measured size starts at least 50 ms after the previous one ended.
    events = []
    funcs = {name: (lambda name=name: events.append((name, time.perf_counter()))) for name in "ab"}
    quick = _bench.TIMINGS["quick"]
    timing = _bench.Timing(
        min_rounds=2, max_rounds=2, budget_s=0.0, min_sample_s=0.0, settle_s=quick.settle_s
    )
    assert _bench.TIMINGS["full"].min_pause_s >= 0.05 and quick.min_pause_s >= 0.05
    assert timing.min_pause_s == quick.min_pause_s
    _bench.time_interleaved(funcs, dict.fromkeys("ab", 1e-3), timing)
    assert [name for name, _ in events] == list("abba")
    gaps = [t1 - t0 for (_, t0), (_, t1) in itertools.pairwise(events)]
    assert min(gaps) >= 0.05


def test_targets_are_a_developer_option(capsys):
    assert main(["bench", "--size", "tiny", "--cases", "matmul-f32-4x4"]) == 0
    plain = capsys.readouterr().out
    assert "speed-up" in plain and "target" not in plain and "met" not in plain
    assert main(["bench", "--size", "tiny", "--cases", "matmul-f32-4x4", "--targets"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if "| case" in line)
    assert "| target" in header and "| met" in header


# --------------------------------------------------------------------------------------------
# What the numbers are worth: the spread of each median, and a warning on a busy machine


def _limits(all_threads: float, one_thread: float, copy_ms: float, cores: int | None = 2) -> dict:
    peak = {"threads": 2, "cores": cores, "gflops_all_threads": all_threads,
            "gflops_one_thread": one_thread}  # fmt: skip
    return {"fma_peak": peak, "copy": {"bytes": 40_000_000, "seconds": copy_ms / 1e3, "gbps": 1}}


IDLE = _limits(116, 60, 2.2)


@pytest.mark.parametrize(
    ("before", "after", "signs"),
    [
        (IDLE, _limits(112, 61, 2.4), []),
        # the FMA peak and the copy of a run on a loaded machine, against an idle one's
        (IDLE, _limits(76, 60, 10.9), ["FMA peak was 116 GFLOP/s before the cases and 76 after",
                                       "copy took 2.20 ms before the cases and 10.90 ms after",
                                       "after the cases, 2 threads on 2 cores ran FMAs 1.3"]),
        # two threads no faster than one on two cores: a core was taken all along
        (_limits(66, 60, 2.2), _limits(66, 60, 2.2), ["2 threads on 2 cores ran FMAs 1.1"] * 2),
        # ... as they should be on one core's two hardware threads
        (_limits(62, 60, 2.2, cores=1), _limits(62, 60, 2.2, cores=1), []),
    ],
)  # fmt: skip
def test_busy_signs_read_the_limits_before_and_after_the_cases(before, after, signs):
    got = _bench.busy_signs(before, after)
    assert len(got) == len(signs)
    for line, sign in zip(got, signs):
        assert sign in line


def test_bench_warns_when_the_machine_looks_busy(monkeypatch, tmp_path, capsys):
    args = ["bench", "--quick", "--cases", "matmul-f32-4x4", "--json", str(tmp_path / "b.json")]
    for after, busy in ((IDLE, False), (_limits(76, 60, 10.9), True)):
        monkeypatch.setattr(_bench, "measure_limits", iter([IDLE, after]).__next__)
        assert main(args) == 0
        out, err = capsys.readouterr()
        data = json.loads((tmp_path / "b.json").read_text())
        assert data["environment"]["limits_before"] == IDLE
        assert data["environment"]["limits"] == after
        assert ("WARNING: the machine looks busy" in out) == busy == bool(data["warnings"])
        assert ("WARNING: the machine looks busy" in err) == busy
        assert "machine limits before the cases: float32 FMA peak 116 GFLOP/s" in out


def test_a_case_of_nan_results_runs_without_warnings():
    # Fractional powers of negative bases are NaN by design, for numpy (a contender) and for
    # the reference alike: every contender is checked and timed, and nothing warns.
    case = _case("pow-negative-f32-e3.7")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = _bench.run_case(case, "tiny")
    assert row.status[_bench.NUMPY] == "ok" and row.ours_ok, row.status
    assert _bench.NUMPY in row.times


def test_medians_come_with_the_spread_of_their_samples(tmp_path):
    row = _bench.run_case(_case("pow-f32-e3.7"), "tiny")
    assert set(row.quartiles) == set(row.times) and row.times
    for name, (q1, q3) in row.quartiles.items():
        assert q1 <= row.times[name] <= q3
    ours = _bench.OURS
    row.times[ours], row.quartiles[ours] = 1e-3, (0.9e-3, 1.1e-3)
    table = _bench.format_table([row])
    assert "| 1 ms ±10% " in table and "- ±: the spread of the samples behind each median" in table
    record = _bench.row_record(row)
    assert (record["numba_onnx_ops_q1_s"], record["numba_onnx_ops_q3_s"]) == (0.9e-3, 1.1e-3)
    _bench.write_json([row], tmp_path / "b.json", {})
    (saved,) = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert saved["numba_onnx_ops_q1_s"] == 0.9e-3
