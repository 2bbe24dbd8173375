"""The benchmarks stay alive: every asv benchmark runs once over the full cartesian product of its
parameters at a tiny size, and the peer comparison runs end to end (and catches wrong results)."""

from __future__ import annotations

import csv
import importlib.util
import inspect
import itertools
import json
import math
import re
import subprocess
import sys
import time
import types
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
    kernels (a row that went to numpy's BLAS would time numpy, not a compilation); a row of a
    user's ``@njit`` function ``f`` has the kernels compiled into it."""
    inputs, call = _FIRST_CALL_ROWS[name]
    namespace: dict = {}
    exec(compile_bench._IMPORTS + inputs, namespace)
    eval(call, namespace)
    if name.startswith("njit "):
        (code,) = namespace["f"].inspect_llvm().values()
        assert re.search(r"numba_onnx_ops\d*ops\d*(pow|matmul)\d*kernels", code)
    else:
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
        "MatMulOwnPoolOrLayer",
        "MatMulInferenceShapes",
        "FmaPeak",
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
    args = ["bench", "--size", "tiny", "--cases", "*"]  # '*': the groups' cases too
    args += ["--csv", str(files["csv"]), "--json", str(files["json"])]
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
    import numba

    # (a case on more threads than numba's pool has runs nothing, and says so)
    fits = [row for row in rows if int(row["threads"] or 1) <= numba.config.NUMBA_NUM_THREADS]
    assert all(row["numba_onnx_ops_status"] == "ok" for row in fits)
    assert all(float(row["numba_onnx_ops_s"]) > 0 and float(row["speed_up"]) > 0 for row in fits)
    for row in rows:
        if row not in fits:
            assert row["numba_onnx_ops_status"].startswith("n/a: needs"), row
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
    assert len(names) == len(_bench.CASES) == 57 + 34  # 34: the GEMM group
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
    assert len(_bench.select_first_calls(None)) == len(_bench.FIRST_CALLS) == 7
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
    assert runs[_bench.UPCAST] == runs[_bench.ORT] == runs[_bench.TORCH] == "-"
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


def test_own_pool_or_layer_benchmark_forces_the_pool_and_restores_the_tuning(launches, monkeypatch):
    """Each side runs its product on a pool: the own pool's (a runner made for it) on its side
    only, where the own pool is available; the tuning is as before after."""
    from numba_onnx_ops import tuning
    from numba_onnx_ops.runtime import parallel, pool

    made = []
    spied = parallel.pool_runner
    monkeypatch.setattr(parallel, "pool_runner", lambda k, a: made.append(k) or spied(k, a))
    cls = percall.MatMulOwnPoolOrLayer
    saved = {name: getattr(tuning, name) for name in ("OWN_POOL", "MATMUL_HERE_MAX")}
    for combo in _grid(cls):
        bench = cls()
        made.clear()
        bench.setup(*combo)
        launches.clear()
        getattr(bench, _methods(cls)[0])(*combo)
        bench.teardown(*combo)
        assert launches and "blas" not in launches, (combo, launches)
        assert bool(made) == (combo[-1] == "own pool" and pool.available()), combo
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


# --------------------------------------------------------------------------------------------
# torch as an optional peer, every contender on a case's threads, and the GEMM group

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (optional peer)")


class _FakeTensor:
    """A stand-in for a torch tensor: a numpy array, for the plumbing around torch's calls."""

    def __init__(self, array: np.ndarray):
        self.array = array

    dtype = property(lambda self: self.array.dtype)
    ndim = property(lambda self: self.array.ndim)

    def reshape(self, *shape):
        return _FakeTensor(self.array.reshape(*shape))

    def __getitem__(self, index):
        return _FakeTensor(self.array[index])

    def to(self, dtype):
        return _FakeTensor(self.array.astype(dtype))

    def numpy(self):
        return self.array


_FakeTensor.__module__ = "torch"  # what as_array tells a torch result by


def _fake_torch(calls: list, kernels: tuple[str, ...] = ("float32",)) -> types.ModuleType:
    """A module that stands in for torch: float32 kernels only, each call logged in ``calls``."""
    torch = types.ModuleType("torch")
    torch.Tensor, torch.bfloat16, torch.int16 = _FakeTensor, object(), np.int16

    def from_numpy(x):
        calls.append("from_numpy")
        return _FakeTensor(x)

    def kernel(name, func):
        def call(x, y):
            calls.append(name)
            if x.dtype.name not in kernels:
                raise NotImplementedError(f'"{name}" not implemented for {x.dtype}')
            return _FakeTensor(func(x.array, y.array if isinstance(y, _FakeTensor) else y))

        return call

    torch.from_numpy = from_numpy
    torch.matmul, torch.pow = kernel("matmul", np.matmul), kernel("pow", np.power)
    torch.set_num_threads = lambda count: calls.append(("threads", count))
    return torch


def _gemm_case(threads: int = 1, dtype: str = "float32") -> _bench.Case:
    return _bench.Case(
        f"gemm-x-{threads}t", "MatMul", (dtype, dtype), ((7, 5), (5, 3)), 1.0, threads=threads,
        group=_bench.GEMM,
    )  # fmt: skip


def test_torch_contender_converts_once_and_runs_on_the_cases_threads(monkeypatch):
    """The tensors are made once, before the first call; torch takes the case's thread count;
    each sample is a block of several calls back to back; the result is checked and timed."""
    calls: list = []
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(calls))
    row = _bench.run_case(_gemm_case(threads=1), "tiny", (_bench.OURS, _bench.TORCH))
    assert row.status[_bench.TORCH] == "ok" and _bench.TORCH in row.times
    assert calls[:3] == [("threads", 1), "from_numpy", "from_numpy"]
    assert set(calls[3:]) == {"matmul"}  # no conversion after the first call
    fewest = _bench.contenders.MIN_CALLS_PER_SAMPLE[_bench.TORCH]
    assert fewest > 1
    rounds = _bench.TIMINGS["tiny"].max_rounds
    # the probe, the first call, three for the estimate, then every round's block
    assert len(calls) - 3 == 1 + 1 + 3 + rounds * fewest


def test_torch_contender_without_a_kernel_or_torch_is_not_available(monkeypatch):
    calls: list = []
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(calls))
    row = _bench.run_case(_gemm_case(dtype="int32"), "tiny", (_bench.OURS, _bench.TORCH))
    assert row.status[_bench.TORCH].startswith("n/a: no MatMul(int32, int32) kernel in torch")
    assert _bench.TORCH not in row.times and row.ours_ok
    monkeypatch.setitem(sys.modules, "torch", None)  # as where it is not installed
    row = _bench.run_case(_gemm_case(), "tiny", (_bench.OURS, _bench.TORCH))
    assert row.status[_bench.TORCH] == "n/a: not installed (torch)"


def test_torch_takes_part_only_where_installed(monkeypatch):
    from numba_onnx_ops.bench import contenders

    monkeypatch.setattr(contenders.importlib.util, "find_spec", lambda name: None)
    assert _bench.TORCH not in _bench.available_contenders()
    assert _bench.available_contenders() == _bench.MAIN_CONTENDERS
    assert _bench.TORCH in _bench.PEERS  # a peer where it runs: the best peer may be torch
    row = _bench.Row(_case("matmul-f32-256"), "full", times={_bench.OURS: 2.0, _bench.TORCH: 1.0})
    assert row.best_peer == (_bench.TORCH, 1.0) and row.ratio == 0.5


def test_the_main_job_leaves_torch_out(monkeypatch, capsys):
    """The main job stays short: torch, whose import alone takes seconds, is not compared."""
    from numba_onnx_ops import __main__ as cli

    seen = []
    monkeypatch.setattr(_bench, "run_comparison", lambda cases, size, contenders, progress:
                        seen.append(contenders) or [])  # fmt: skip
    assert cli.demo() == 0
    assert seen == [_bench.MAIN_CONTENDERS] and _bench.TORCH not in _bench.MAIN_CONTENDERS
    assert "torch" not in capsys.readouterr().out.split("3. Short peer comparison")[1]


@needs_torch
@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("matmul-f16-1024", "ok"),
        ("matmul-bf16-1024", "ok"),
        ("matmul-i64-512", "ok"),
        ("matmul-u32-512", "n/a: no MatMul(uint32, uint32) kernel in torch"),
        ("matmul-f32-bcast8x8x256", "ok"),
        ("gemm-bf16-batch64x128x64x128-1t", "ok"),
        ("pow-f32-row", "ok"),
        ("pow-bf16-f32e3.7", "ok"),
        ("call-pow16-i32-e3", "ok"),
        ("model-f32-b1-w64", "-"),
    ],
)
def test_torch_results_are_checked_like_every_other_contenders(name, status):
    row = _bench.run_case(_case(name), "tiny", (_bench.OURS, _bench.TORCH))
    assert row.status[_bench.TORCH].startswith(status), row.status
    assert (_bench.TORCH in row.times) == (status == "ok")


@needs_torch
def test_torch_tensors_share_the_inputs_memory_bfloat16_through_its_bits():
    import ml_dtypes
    import torch

    from numba_onnx_ops.bench.contenders import _torch_tensor, as_array

    x = np.array([[1.5, -2.0], [3.0, 0.25]], dtype=ml_dtypes.bfloat16)
    t = _torch_tensor(torch, x)
    assert t.dtype == torch.bfloat16 and t.tolist() == x.astype(np.float32).tolist()
    back = as_array(t)
    assert back.dtype == x.dtype and np.shares_memory(back, x)
    with _bench.contender_threads(1):
        _bench.contenders.FACTORIES[_bench.TORCH](_case("matmul-f32-256"), x, x)
        assert torch.get_num_threads() == 1


def test_contender_threads_hold_numba_and_numpys_blas(monkeypatch):
    import numba

    saved = numba.get_num_threads()
    try:
        import threadpoolctl
    except ImportError:
        threadpoolctl = None
    with _bench.contender_threads(1) as limited:
        assert numba.get_num_threads() == 1
        assert limited == (threadpoolctl is not None)
        if threadpoolctl is not None:
            blas = [i["num_threads"] for i in threadpoolctl.threadpool_info()
                    if i["user_api"] == "blas"]  # fmt: skip
            assert blas and set(blas) == {1}
    assert numba.get_num_threads() == saved
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # as where it is not installed
    with _bench.contender_threads(1) as limited:
        assert numba.get_num_threads() == 1 and limited is False
    assert numba.get_num_threads() == saved


def test_a_case_runs_every_contender_on_its_threads(monkeypatch):
    """Each factory is built, and each call made, with numba's pool (whose count onnxruntime's
    session and torch take) on the case's threads; the row says whether the BLAS was held."""
    import numba

    seen = []

    def spy(name):
        def factory(case, a, b):
            seen.append((name, "built", numba.get_num_threads()))

            def call():
                seen.append((name, "call", numba.get_num_threads()))
                return np.matmul(a, b)

            return call

        return factory

    for name in (_bench.OURS, _bench.NUMPY):
        monkeypatch.setitem(runner.FACTORIES, name, spy(name))
    row = _bench.run_case(_gemm_case(threads=1), "tiny", (_bench.OURS, _bench.NUMPY))
    assert row.ours_ok and {threads for *_, threads in seen} == {1}
    assert row.blas_limited is not None and row.case.threads == 1
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)
    row = _bench.run_case(_gemm_case(threads=1), "tiny", (_bench.OURS, _bench.NUMPY))
    assert row.blas_limited is False
    assert "numpy's BLAS kept its own thread count" in _bench.format_table([row])
    assert "BLAS" not in _bench.format_table([_bench.run_case(_case("matmul-f32-4x4"), "tiny")])


def test_a_case_on_more_threads_than_numbas_pool_runs_nothing(monkeypatch):
    import numba

    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 1)
    monkeypatch.setitem(runner.FACTORIES, _bench.OURS, lambda *args: pytest.fail("ran"))
    row = _bench.run_case(_gemm_case(threads=2), "tiny", (_bench.OURS, _bench.NUMPY))
    assert row.too_few_threads and not row.times
    assert set(row.status.values()) == {"n/a: needs 2 threads, numba's pool has 1"}


def test_samples_hold_at_least_the_fewest_calls_asked():
    calls = Counter()
    funcs = {name: (lambda name=name: calls.update([name])) for name in "ab"}
    timing = _bench.Timing(min_rounds=3, max_rounds=3, budget_s=0.0, min_sample_s=0.0,
                           settle_s=0.0, min_pause_s=0.0)  # fmt: skip
    _bench.time_interleaved(funcs, dict.fromkeys("ab", 1.0), timing, {"a": 4})
    assert calls == {"a": 3 * 4, "b": 3}


def test_the_gemm_group_runs_only_when_named():
    gemm = _bench.select_cases(["gemm"])
    assert len(gemm) == 34 and all(case.group == _bench.GEMM for case in gemm)
    assert [case.threads for case in gemm] == [1, 2] * 17
    # the best peer's pace everywhere, 1.2 times it on two threads up to 256 rows
    assert {(c.threads, c.shapes[0][-2] <= 256, c.target) for c in gemm} == {
        (1, True, 1.0),
        (1, False, 1.0),
        (2, True, 1.2),
        (2, False, 1.0),
    }
    assert {case.op for case in gemm} == {"MatMul"}
    assert {case.dtypes[0] for case in gemm} == {"float32", "float64", "float16", "bfloat16"}
    default = _bench.select_cases(None)
    assert default == [case for case in _bench.CASES if case.group is None]
    assert not set(default) & set(gemm) and len(default) + len(gemm) == len(_bench.CASES)
    assert _bench.select_cases(["*"]) == list(_bench.CASES)
    (case,) = _bench.select_cases(["gemm-bf16-batch64x128x64x128-2t"])
    assert case.shapes == ((64, 128, 64), (64, 64, 128)) and case.threads == 2
    assert case.label() == "bfloat16 (64,128,64) @ (64,64,128), 2 threads"
    with pytest.raises(ValueError, match="a group is one of"):
        _bench.Case("x", "MatMul", ("float32",) * 2, ((2, 2), (2, 2)), 1.0, group="nothing")


@pytest.mark.parametrize(
    ("name", "flop"),
    [
        ("gemm-f32-32x256x256-1t", 2 * 32 * 256 * 256),
        ("gemm-f32-64x128x64-2t", 2 * 64 * 128 * 64),
        ("gemm-bf16-batch64x128x64x128-1t", 2 * 64 * 128 * 64 * 128),
        ("matmul-f32-bcast8x8x256", 2 * 64 * 256**3),
        ("matmul-f32-matvec4096", 2 * 4096 * 4096),
        ("matmul-f32-vecmat4096", 2 * 4096 * 4096),
        ("pow-f32-e3.7", None),
    ],
)
def test_flop_counts_two_per_multiply_add(name, flop):
    assert _case(name).flop() == flop


def _limits_with_peak(one: float, every: float, threads: int = 2) -> dict:
    peak = {"threads": threads, "cores": 2, "gflops_one_thread": one, "gflops_all_threads": every}
    return {"fma_peak": peak, "copy": {"bytes": 4e7, "seconds": 3e-3, "gbps": 27.0}}


def test_gemm_rows_show_gflops_beside_the_fma_peak_of_their_threads():
    ours, torch = _bench.OURS, _bench.TORCH
    one, two = _case("gemm-f32-256-1t"), _case("gemm-f32-256-2t")
    flop = 2 * 256**3
    rows = [
        _bench.Row(one, "full", times={ours: flop / 30e9, torch: flop / 45e9}),
        _bench.Row(two, "full", times={ours: flop / 100e9}),
        _bench.Row(_case("matmul-f32-256"), "full", times={ours: 1e-3}),  # not of the group
    ]
    limits = [_limits_with_peak(58, 110), _limits_with_peak(60, 120)]  # the higher counts
    table = _bench.format_gflops_table(rows, limits, (ours, _bench.NUMPY, torch))
    lines = table.splitlines()
    header = [cell.strip() for cell in lines[0].split("|")[1:-1]]
    assert header == ["case", "threads", "FMA peak", ours, "torch"]  # numpy: no times, no column
    assert "| gemm-f32-256-1t | 1       | 60       | 30 (50%)       | 45 (75%) |" in lines
    assert "| gemm-f32-256-2t | 2       | 120      | 100 (83%)      | -        |" in lines
    assert "matmul-f32-256" not in table and "share of the FMA peak column" in table
    # no peak measured (--size tiny), or on other thread counts: the GFLOP/s alone
    assert "| -        | 30             |" in _bench.format_gflops_table(rows[:1], [], (ours,))
    three = [_limits_with_peak(60, 170, threads=3)]
    assert "| 2       | -        | 100 " in _bench.format_gflops_table(rows[1:2], three, (ours,))
    assert _bench.format_gflops_table(rows[2:], limits) == ""
    record = _bench.row_record(rows[0])
    assert record["flop"] == flop and record["threads"] == 1
    assert record[f"{ours}_gflops"] == pytest.approx(30) and record["numpy_gflops"] is None


def test_bench_prints_the_gemm_rows_gflops_after_the_table(monkeypatch, capsys):
    ok = {_bench.OURS: "ok", _bench.NUMPY: "ok"}
    flop = 2 * 256**3

    def rows(cases, size, contenders, progress):
        return [_bench.Row(c, size, times=dict.fromkeys(ok, flop / 30e9), status=ok) for c in cases]

    monkeypatch.setattr(_bench, "measure_limits", lambda: _limits_with_peak(60, 120))
    monkeypatch.setattr(_bench, "run_comparison", rows)
    assert main(["bench", "--quick", "--cases", "gemm-f32-256-1t", "matmul-f32-4x4"]) == 0
    out = capsys.readouterr().out
    table, gemm = out.split("GEMM rows, GFLOP/s")
    assert "| gemm-f32-256-1t " in table and "| matmul-f32-4x4 " in table
    assert "| gemm-f32-256-1t | 1       | 60       | 30 (50%)" in gemm
    assert "matmul-f32-4x4" not in gemm


def test_environment_names_torch_where_installed():
    env = _bench.environment()
    assert (env["torch"] is not None) == HAS_TORCH
    line = _bench.environment_line({**env, "torch": "9.9.9+cpu"})
    assert "onnxruntime " in line and ", torch 9.9.9+cpu;" in line
    assert "torch" not in _bench.environment_line({**env, "torch": None})
