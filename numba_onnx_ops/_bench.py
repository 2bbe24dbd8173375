"""Peer comparison: numba_onnx_ops against numpy and onnxruntime, timed side by side.

``python -m numba_onnx_ops bench`` runs every case of the two speed issues (MatMul and Pow
targets).  For each case it

1. builds seeded inputs,
2. calls every contender once (for this library that first call includes compilation) and checks
   each result against a reference (exact for integers, a tolerance in ulps or in units of
   ``K * eps * (|A| @ |B|)`` for floats); a contender that disagrees is reported and not timed,
3. times the contenders interleaved: in each round every contender takes one sample (as many
   back-to-back calls as last a few milliseconds), after waiting for the previous contender's
   worker threads to stop spinning; the order rotates from round to round, and the median sample
   per contender is kept,
4. reports ``ratio = best peer's median / ours``: above 1 this library is faster.

Peers: ``numpy`` (what a user writes: ``a @ b``, ``x ** 3.7``, cast back to the input dtype where
numpy promotes), ``numpy f32 upcast`` for the half types (``float32`` compute, one cast back), and
``onnxruntime`` (a one-node model, CPU provider, as many intra-op threads as numba uses, the session
built once), when installed.  matplotlib is needed only for ``--plot``.

Only the public API of the package is used here.
"""

from __future__ import annotations

import csv
import datetime
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import ml_dtypes
import numpy as np

from . import __version__, matmul, pow
from ._reference import pow_int as _int_pow_reference
from ._reference import ulp_distance as _ulp_distance

Shape = tuple[int, ...]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
HALF_TYPES = (np.dtype(np.float16), BFLOAT16)

OURS = "numba_onnx_ops"
NUMPY = "numpy"
UPCAST = "numpy f32 upcast"
ORT = "onnxruntime"
CONTENDERS = (OURS, NUMPY, UPCAST, ORT)
PEERS = CONTENDERS[1:]

#: Default-domain opset of the onnxruntime models: MatMul-13 and Pow-15 (the newest versions).
ORT_OPSET = {"MatMul": 13, "Pow": 15}

#: Largest dimension of the ``tiny`` size: enough to reach every code path, too small to time.
TINY_DIM = 7

#: The agreement tolerance of Pow results in units in the last place of the output type.  The
#: library promises 1 ulp; peers such as onnxruntime's ``x*x*x`` in float32 come within 2.
POW_ULPS = 2.0


@dataclass(frozen=True)
class Timing:
    """How much measuring a size gets: rounds of interleaved calls and a time budget."""

    min_rounds: int
    max_rounds: int
    budget_s: float  # stop after min_rounds once a case has spent this long measuring
    min_sample_s: float  # calls are repeated within a round until one sample lasts this long
    # Before each sample, wait (up to this long) until the process uses no CPU. Worker threads
    # keep spinning after a parallel call: measured here, OpenBLAS's (numpy) and onnxruntime's
    # burn about half a core for 100 ms after each call, which slows whichever contender runs
    # next on 2 cores by up to several times.
    settle_s: float


TIMINGS = {
    "full": Timing(min_rounds=7, max_rounds=31, budget_s=5.0, min_sample_s=5e-3, settle_s=0.3),
    "quick": Timing(min_rounds=3, max_rounds=9, budget_s=1.0, min_sample_s=2e-3, settle_s=0.3),
    "tiny": Timing(min_rounds=2, max_rounds=2, budget_s=0.0, min_sample_s=0.0, settle_s=0.0),
}
SIZES = tuple(TIMINGS)


@dataclass(frozen=True)
class Case:
    """One comparison: an operator on two inputs of given dtypes and shapes.

    ``exponent`` (Pow only) makes Y a 0-d array of that value; otherwise Y is random data of
    ``shapes[1]``.  ``quick_shapes`` replaces ``shapes`` under ``--quick`` where a peer would take
    seconds per call at full size.
    """

    name: str
    op: str
    dtypes: tuple[str, str]
    shapes: tuple[Shape, Shape]
    target: float
    exponent: float | None = None
    quick_shapes: tuple[Shape, Shape] | None = None

    def shapes_at(self, size: str) -> tuple[Shape, Shape]:
        if size == "quick" and self.quick_shapes is not None:
            return self.quick_shapes
        if size == "tiny":
            # min(d, TINY_DIM) keeps equal dimensions equal and 1s as 1s: broadcasting survives.
            return tuple(tuple(min(d, TINY_DIM) for d in s) for s in self.shapes)  # type: ignore[return-value]
        return self.shapes

    def label(self, size: str = "full") -> str:
        (sa, sb), (da, db) = self.shapes_at(size), self.dtypes
        if self.op == "MatMul":
            return f"{da} {_fmt_shape(sa)} @ {_fmt_shape(sb)}"
        if self.exponent is not None:
            return f"{da} {_fmt_shape(sa)} ^ {db} {self.exponent:g}"
        return f"{da} {_fmt_shape(sa)} ^ {db} {_fmt_shape(sb)}"


def _mm(name, dtype, a, b, target, quick=None) -> Case:
    return Case(name, "MatMul", (dtype, dtype), (a, b), target, quick_shapes=quick)


def _pw(name, dtype, x, target, *, exponent=None, y_dtype=None, y_shape=()) -> Case:
    return Case(name, "Pow", (dtype, y_dtype or dtype), (x, y_shape), target, exponent=exponent)


_SQ = (1024, 1024)
_SQ_QUICK = ((256, 256), (256, 256))  # numpy's half-type matmul is a scalar loop: 7 s at 1024
_X = (1000, 10_000)  # 10 million elements, as in the Pow issue

#: Every case of the MatMul issue's and the Pow issue's target tables, with its target ratio.
CASES: tuple[Case, ...] = (
    _mm("matmul-f32-1024", "float32", _SQ, _SQ, 0.95),
    _mm("matmul-f64-1024", "float64", _SQ, _SQ, 0.95),
    _mm("matmul-f32-256", "float32", (256, 256), (256, 256), 1.0),
    _mm("matmul-f16-1024", "float16", _SQ, _SQ, 1.0, quick=_SQ_QUICK),
    _mm("matmul-bf16-1024", "bfloat16", _SQ, _SQ, 1.0, quick=_SQ_QUICK),
    _mm("matmul-i32-512", "int32", (512, 512), (512, 512), 3.0),
    _mm("matmul-u32-512", "uint32", (512, 512), (512, 512), 3.0),
    _mm("matmul-i64-512", "int64", (512, 512), (512, 512), 2.0),
    _mm("matmul-f32-batch4096x8x8", "float32", (4096, 8, 8), (4096, 8, 8), 3.0),
    _mm("matmul-f32-batch64x128x64", "float32", (64, 128, 64), (64, 64, 128), 1.0),
    _mm("matmul-f32-bcast8x8x256", "float32", (8, 1, 256, 256), (1, 8, 256, 256), 1.0),
    _mm("matmul-f32-matvec4096", "float32", (4096, 4096), (4096,), 0.95),
    _mm("matmul-f32-vecmat4096", "float32", (1, 4096), (4096, 4096), 0.95),
    _mm("matmul-f32-4x4", "float32", (4, 4), (4, 4), 0.5),
    _pw("pow-f32-e2", "float32", _X, 1.2, exponent=2.0),
    _pw("pow-f32-e3.7", "float32", _X, 3.0, exponent=3.7),
    _pw("pow-f32-e0.5", "float32", _X, 2.0, exponent=0.5),
    _pw("pow-f32-same", "float32", _X, 3.0, y_shape=_X),
    _pw("pow-f32-row", "float32", _X, 3.0, y_shape=(_X[1],)),
    _pw("pow-f64-e3.7", "float64", _X, 1.5, exponent=3.7),
    _pw("pow-i32-e3", "int32", _X, 1.2, exponent=3),
    _pw("pow-i64-e3", "int64", _X, 1.2, exponent=3),
    _pw("pow-f16-e2", "float16", _X, 2.0, exponent=2.0),
    _pw("pow-f16-e3.7", "float16", _X, 2.0, exponent=3.7),
    _pw("pow-f32-i64e2", "float32", _X, 1.2, exponent=2, y_dtype="int64"),
    _pw("pow-bf16-f32e3.7", "bfloat16", _X, 3.0, exponent=3.7, y_dtype="float32"),
)

#: The short comparison of the main job (``python -m numba_onnx_ops``): one case per kind of
#: kernel, so that it stays well under a minute with compilation.
DEMO_CASES = (
    "matmul-f32-256",
    "matmul-i32-512",
    "matmul-f32-batch4096x8x8",
    "pow-f32-e3.7",
    "pow-f32-row",
    "pow-f16-e2",
)


def select_cases(patterns: Sequence[str] | None) -> list[Case]:
    """The cases whose name matches any pattern (a glob, or a plain substring), in table order.

    Raises
    ------
    ValueError
        If a pattern matches no case.
    """
    if not patterns:
        return list(CASES)
    unmatched = [p for p in patterns if not any(_matches(c.name, p) for c in CASES)]
    if unmatched:
        names = ", ".join(c.name for c in CASES)
        raise ValueError(f"no case matches {unmatched}; the cases are: {names}")
    return [c for c in CASES if any(_matches(c.name, p) for p in patterns)]


def _matches(name: str, pattern: str) -> bool:
    return fnmatchcase(name, pattern) or pattern in name


# --------------------------------------------------------------------------------------------
# Inputs


def make_inputs(case: Case, size: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded inputs of ``case`` at ``size``: small integers, floats of moderate magnitude.

    Pow bases are positive (a non-integer power of a negative base is NaN, the special-value path);
    integer bases in [-1000, 1000) cube without overflow.
    """
    rng = np.random.default_rng(seed)
    (sa, sb), (da, db) = case.shapes_at(size), (np.dtype(d) for d in case.dtypes)
    if case.op == "MatMul":
        return _random(rng, sa, da, (-1.0, 1.0), (-100, 100)), _random(
            rng, sb, db, (-1.0, 1.0), (-100, 100)
        )
    x = _random(rng, sa, da, (0.25, 4.0), (-1000, 1000))
    if case.exponent is not None:
        return x, np.asarray(case.exponent).astype(db)
    return x, _random(rng, sb, db, (-3.0, 3.0), (0, 4))


def _random(rng, shape, dtype, float_range, int_range) -> np.ndarray:
    if dtype.kind in "iu":
        lo = max(int_range[0], 0) if dtype.kind == "u" else int_range[0]
        return rng.integers(lo, int_range[1], size=shape).astype(dtype)
    return rng.uniform(*float_range, size=shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# Contenders: each factory returns a zero-argument callable with its inputs bound, or raises
# Unavailable.


class Unavailable(Exception):
    """A contender that cannot run this case (not installed, or no kernel for these dtypes)."""


def _ours(case: Case, a: np.ndarray, b: np.ndarray) -> Callable[[], np.ndarray]:
    op = matmul if case.op == "MatMul" else pow
    return lambda: op(a, b)


def _numpy(case: Case, a: np.ndarray, b: np.ndarray) -> Callable[[], np.ndarray]:
    if case.op == "MatMul":
        expr = np.matmul
    elif b.ndim == 0:
        # A Python scalar, as a numpy user writes it: weakly typed, and numpy's ``**`` takes its
        # shortcuts (square, sqrt, reciprocal) only for scalars.
        y = int(b) if b.dtype.kind in "iu" else float(b)

        def expr(x, _b):
            return x**y
    else:
        expr = np.power
    # Where numpy promotes (bfloat16 results come back as float32, float32 ** int64 arrays as
    # float64), the cast back to the input dtype is part of the work. A 1x1 probe tells.
    if expr(np.ones((1, 1), a.dtype), np.ones((1, 1), b.dtype)).dtype == a.dtype:
        return lambda: expr(a, b)
    return lambda: expr(a, b).astype(a.dtype)


def _numpy_upcast(case: Case, a: np.ndarray, b: np.ndarray) -> Callable[[], np.ndarray]:
    if a.dtype not in HALF_TYPES:
        raise Unavailable("-")  # only the half types have a float32 detour
    f32 = np.float32
    if case.op == "MatMul":
        return lambda: np.matmul(a.astype(f32), b.astype(f32)).astype(a.dtype)
    if b.ndim == 0:
        y = f32(b)
        return lambda: (a.astype(f32) ** y).astype(a.dtype)
    return lambda: np.power(a.astype(f32), b.astype(f32)).astype(a.dtype)


def _onnxruntime(case: Case, a: np.ndarray, b: np.ndarray) -> Callable[[], np.ndarray]:
    try:
        import onnxruntime as ort
        from onnx import helper
    except ImportError as exc:
        raise Unavailable(f"not installed ({exc.name})") from None
    import numba

    def info(name, dtype):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), None)

    out_type = helper.np_dtype_to_tensor_dtype(a.dtype)
    graph = helper.make_graph(
        [helper.make_node(case.op, ["a", "b"], ["out"])],
        f"{case.op.lower()}_bench",
        [info("a", a.dtype), info("b", b.dtype)],
        [helper.make_tensor_value_info("out", out_type, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ORT_OPSET[case.op])])
    model.ir_version = 10  # onnxruntime reads IR <= 11; onnx may write a newer one
    options = ort.SessionOptions()
    options.intra_op_num_threads = numba.get_num_threads()  # the same thread count as ours
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own error types, e.g. NotImplemented
        kernel = f"{case.op}({a.dtype}, {b.dtype})"
        reason = f"no {kernel} kernel" if "NOT_IMPLEMENTED" in str(exc) else str(exc)
        raise Unavailable(reason) from None
    feeds = {"a": a, "b": b}
    return lambda: session.run(["out"], feeds)[0]


_FACTORIES = {OURS: _ours, NUMPY: _numpy, UPCAST: _numpy_upcast, ORT: _onnxruntime}


# --------------------------------------------------------------------------------------------
# Agreement check


def check(case: Case, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> str | None:
    """``None`` when ``out`` agrees with the reference for ``case`` on inputs ``a``, ``b``;
    otherwise a short reason."""
    if case.op == "MatMul":
        return _check_matmul(a, b, out)
    expected = np.broadcast_shapes(a.shape, b.shape)
    if out.shape != expected or out.dtype != a.dtype:
        return f"got {out.dtype} {out.shape}, expected {a.dtype} {expected}"
    return _check_pow(a, b, out)


def _check_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> str | None:
    # numpy's integer matmul is exact modulo 2**bits; floats are compared with a float64 product.
    exact = a.dtype.kind in "iu"
    a64, b64 = (a, b) if exact else (a.astype(np.float64), b.astype(np.float64))
    ref = np.matmul(a64, b64)
    if out.shape != ref.shape or out.dtype != a.dtype:
        return f"got {out.dtype} {out.shape}, expected {a.dtype} {ref.shape}"
    if exact:
        bad = np.count_nonzero(out != ref)
        return f"{bad} of {out.size} entries differ" if bad else None
    # Summation error of any order is at most K * eps * (|A| @ |B|); add one rounding to output.
    k = a.shape[-1]
    eps_acc = np.finfo(np.float64 if a.dtype == np.float64 else np.float32).eps
    bound = k * eps_acc * np.matmul(np.abs(a64), np.abs(b64)) + _eps(a.dtype) * np.abs(ref)
    err = np.abs(out.astype(np.float64) - ref)
    bad = np.count_nonzero(~(err <= bound))
    if bad:
        worst = float(np.max(err - bound))
        return f"{bad} of {out.size} entries beyond K*eps*(|A|@|B|) (by up to {worst:.3g})"
    return None


def _check_pow(x: np.ndarray, y: np.ndarray, out: np.ndarray, samples: int = 100_000) -> str | None:
    """Compare a random sample of ``out`` with a reference: longdouble ``pow`` rounded to the
    output type for floats (within ``POW_ULPS``), exact integer powers with wraparound."""
    rng = np.random.default_rng(1)
    n = out.size
    flat = rng.choice(n, size=min(n, samples), replace=False) if n > samples else np.arange(n)
    index = np.unravel_index(flat, out.shape)
    xs = np.broadcast_to(x, out.shape)[index]
    ys = np.broadcast_to(y, out.shape)[index]
    got = out[index]
    if x.dtype.kind in "iu":
        ref = _int_pow_reference(xs, ys)
        bad = np.count_nonzero(got != ref)
        return f"{bad} of {got.size} sampled entries differ" if bad else None
    ref = np.power(xs.astype(np.longdouble), ys.astype(np.float64).astype(np.longdouble))
    ref = ref.astype(np.float64).astype(x.dtype)  # round once (twice for the half types: harmless)
    ulps = _ulp_distance(got, ref)
    bad = np.count_nonzero(~(ulps <= POW_ULPS))
    if bad:
        return (
            f"{bad} of {got.size} sampled entries beyond {POW_ULPS:g} ulp (max {np.max(ulps):.3g})"
        )
    return None


def _finfo(dtype: np.dtype):
    return ml_dtypes.finfo(dtype) if dtype == BFLOAT16 else np.finfo(dtype)


def _eps(dtype: np.dtype) -> float:
    return float(_finfo(dtype).eps)


# --------------------------------------------------------------------------------------------
# Timing


def wait_until_idle(limit_s: float, window_s: float = 5e-3) -> float:
    """Sleep until this process's threads stop using CPU (less than a fifth of a core over a
    ``window_s`` window), or ``limit_s`` has passed; return the seconds waited."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        cpu = time.process_time()
        time.sleep(window_s)
        if time.process_time() - cpu < 0.2 * window_s:
            break
    return time.perf_counter() - start


def time_interleaved(
    funcs: dict[str, Callable[[], Any]], estimates: dict[str, float], timing: Timing
) -> dict[str, list[float]]:
    """Seconds per call of each function, one sample per round, rounds interleaved.

    ``estimates`` (seconds per call) set how many calls make one sample, so that a sample lasts
    at least ``timing.min_sample_s``.  Rounds go on until ``timing.min_rounds`` are done and
    ``timing.budget_s`` is spent, or ``timing.max_rounds``; a case whose slowest call takes over
    a second settles for three rounds.
    """
    names = list(funcs)
    number = {n: max(1, math.ceil(timing.min_sample_s / max(estimates[n], 1e-9))) for n in names}
    min_rounds = timing.min_rounds
    if max(estimates.values(), default=0.0) > 1.0:
        min_rounds = min(min_rounds, 3)
    samples: dict[str, list[float]] = {n: [] for n in names}
    start = time.perf_counter()  # the budget counts the pauses too
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(timing.max_rounds):
            shift = r % max(len(names), 1)
            for name in names[shift:] + names[:shift]:
                func, count = funcs[name], number[name]
                wait_until_idle(timing.settle_s)
                t0 = time.perf_counter()
                for _ in range(count):
                    func()
                samples[name].append((time.perf_counter() - t0) / count)
            if r + 1 >= min_rounds and time.perf_counter() - start >= timing.budget_s:
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


# --------------------------------------------------------------------------------------------
# Running the comparison


@dataclass
class Row:
    """The outcome of one case: median seconds per contender, or why there is none."""

    case: Case
    size: str
    times: dict[str, float] = field(default_factory=dict)
    first_call: dict[str, float] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)  # "ok", "n/a: ...", "wrong: ...", ...
    rounds: int = 0

    @property
    def best_peer(self) -> tuple[str, float] | None:
        peers = [(self.times[p], p) for p in PEERS if p in self.times]
        return (min(peers)[1], min(peers)[0]) if peers else None

    @property
    def ratio(self) -> float | None:
        best = self.best_peer
        if best is None or OURS not in self.times:
            return None
        return best[1] / self.times[OURS]

    @property
    def judged(self) -> bool:
        """Whether the target applies: the target's shapes, timed for real (not ``tiny``)."""
        return self.size != "tiny" and self.case.shapes_at(self.size) == self.case.shapes

    @property
    def met(self) -> bool | None:
        """Whether the ratio reaches the issue's target (``None`` when not :attr:`judged`)."""
        if self.ratio is None or not self.judged:
            return None
        return self.ratio >= self.case.target

    @property
    def ours_ok(self) -> bool:
        return self.status.get(OURS) == "ok"


def run_case(
    case: Case,
    size: str = "full",
    contenders: Sequence[str] = CONTENDERS,
    progress: Callable[[str], None] | None = None,
) -> Row:
    """Check and time one case (see the module docstring)."""
    say = progress or (lambda _msg: None)
    row = Row(case, size)
    a, b = make_inputs(case, size)
    funcs: dict[str, Callable[[], Any]] = {}
    for name in contenders:
        try:
            func = _FACTORIES[name](case, a, b)
            t0 = time.perf_counter()
            out = func()
            row.first_call[name] = time.perf_counter() - t0
        except Unavailable as exc:
            row.status[name] = "-" if str(exc) == "-" else f"n/a: {exc}"
            continue
        except Exception as exc:  # a failing contender is reported, not fatal to the run
            row.status[name] = f"error: {type(exc).__name__}: {exc}"
            continue
        problem = check(case, a, b, out)
        del out
        row.status[name] = f"wrong: {problem}" if problem else "ok"
        if problem is None:
            funcs[name] = func
    say("  first call " + _fmt_first_calls(row))
    for name, status in row.status.items():
        if status not in ("ok", "-"):
            say(f"  {name}: {status}")
    if not funcs:
        return row
    # One more call each: a steadier estimate than the first (which for us includes compiling).
    estimates = {}
    for name, func in funcs.items():
        t0 = time.perf_counter()
        func()
        estimates[name] = time.perf_counter() - t0
    samples = time_interleaved(funcs, estimates, TIMINGS[size])
    row.times = {name: statistics.median(s) for name, s in samples.items()}
    row.rounds = len(next(iter(samples.values())))
    ratio = f"  ratio {_fmt_ratio(row.ratio)}" if row.ratio is not None else ""
    medians = ", ".join(f"{n} {_fmt_time(t)}" for n, t in row.times.items())
    say(f"  median of {row.rounds} rounds: {medians}{ratio}")
    return row


def run_comparison(
    cases: Sequence[Case],
    size: str = "full",
    contenders: Sequence[str] = CONTENDERS,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """Run :func:`run_case` on each case in turn, announcing each through ``progress``."""
    rows = []
    for i, case in enumerate(cases, 1):
        if progress:
            progress(f"[{i}/{len(cases)}] {case.name}: {case.label(size)}")
        rows.append(run_case(case, size, contenders, progress))
    return rows


# --------------------------------------------------------------------------------------------
# Reporting


def environment() -> dict[str, Any]:
    """Versions, threads and processor: what a reader of the numbers needs to know."""
    import numba

    try:
        import onnxruntime

        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "numba_onnx_ops": __version__,
        "numpy": np.__version__,
        "numba": numba.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "onnxruntime": ort_version,
        "python": platform.python_version(),
        "threads": numba.get_num_threads(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
    }


def environment_line(env: dict[str, Any]) -> str:
    ort = env["onnxruntime"] or "not installed"
    return (
        f"numba_onnx_ops {env['numba_onnx_ops']}, numpy {env['numpy']}, numba {env['numba']}, "
        f"onnxruntime {ort}; {env['threads']} threads on {env['cores']} cores ({env['cpu']})"
    )


def _fmt_shape(shape: Shape) -> str:
    return "(" + ",".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _fmt_ratio(ratio: float) -> str:
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"


def _fmt_first_calls(row: Row) -> str:
    parts = [f"{n} {_fmt_time(t)}" for n, t in row.first_call.items()]
    verdict = (
        "all agree"
        if all(s in ("ok", "-") or s.startswith("n/a") for s in row.status.values())
        else "MISMATCH"
    )
    return ", ".join(parts) + f" ({OURS} includes compiling); {verdict}"


def _cell(row: Row, name: str) -> str:
    if name in row.times:
        return _fmt_time(row.times[name])
    status = row.status.get(name, "-")
    return status.split(":", 1)[0] if status != "-" else "-"


def format_table(rows: Sequence[Row], contenders: Sequence[str] = CONTENDERS) -> str:
    """A markdown table: one line per case with the medians, the best peer and the ratio."""
    header = ["case", "inputs", *contenders, "best peer", "ratio", "target", "met"]
    lines = [header]
    for row in rows:
        best = row.best_peer
        ratio = row.ratio
        met = {True: "yes", False: "NO", None: "-"}[row.met]
        if not row.ours_ok:
            met = "OURS " + row.status.get(OURS, "missing").split(":", 1)[0].upper()
        lines.append(
            [
                row.case.name,
                row.case.label(row.size),
                *(_cell(row, n) for n in contenders),
                best[0] if best else "-",
                _fmt_ratio(ratio) if ratio is not None else "-",
                f">= {row.case.target:g}" if row.judged else f"(>= {row.case.target:g})",
                met,
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for i, line in enumerate(lines):
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |")
        if i == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    notes = _notes(rows)
    return "\n".join(out + ([""] + notes if notes else []))


def _notes(rows: Sequence[Row]) -> list[str]:
    notes = []
    for row in rows:
        for name, status in row.status.items():
            if status not in ("ok", "-"):
                notes.append(f"- {row.case.name}, {name}: {status}")
    if any(not row.judged for row in rows):
        notes.append(
            "- target in parentheses: not the target's shapes (or --size tiny), so no verdict"
        )
    return notes


def row_record(row: Row) -> dict[str, Any]:
    """A flat, JSON- and CSV-friendly record of one row (times in seconds)."""
    (sa, sb), best = row.case.shapes_at(row.size), row.best_peer
    record: dict[str, Any] = {
        "case": row.case.name,
        "op": row.case.op,
        "inputs": row.case.label(row.size),
        "size": row.size,
        "dtype_a": row.case.dtypes[0],
        "dtype_b": row.case.dtypes[1],
        "shape_a": list(sa),
        "shape_b": list(sb),
    }
    for name in CONTENDERS:
        key = name.replace(" ", "_")
        record[f"{key}_s"] = row.times.get(name)
        record[f"{key}_status"] = row.status.get(name, "-")
    record.update(
        {
            "ours_first_call_s": row.first_call.get(OURS),
            "rounds": row.rounds,
            "best_peer": best[0] if best else None,
            "best_peer_s": best[1] if best else None,
            "ratio": row.ratio,
            "target": row.case.target,
            "met": row.met,
        }
    )
    return record


def write_csv(rows: Sequence[Row], path: str) -> None:
    records = [row_record(r) for r in rows]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]) if records else ["case"])
        writer.writeheader()
        for record in records:
            writer.writerow(
                {k: "x".join(map(str, v)) if isinstance(v, list) else v for k, v in record.items()}
            )


def write_json(rows: Sequence[Row], path: str, env: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump({"environment": env, "rows": [row_record(r) for r in rows]}, f, indent=1)
        f.write("\n")


def plot(rows: Sequence[Row], path: str, env: dict[str, Any]) -> None:
    """A two-panel bar chart: median time per contender (log scale) and the ratio against the
    target per case (log scale, 1 marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.case.name for r in rows]
    y = np.arange(len(rows))
    fig, (ax_t, ax_r) = plt.subplots(
        1, 2, figsize=(15, 0.42 * len(rows) + 2.2), sharey=True, width_ratios=(3, 2)
    )
    colors = {OURS: "tab:blue", NUMPY: "tab:orange", UPCAST: "tab:olive", ORT: "tab:purple"}
    height = 0.8 / len(CONTENDERS)
    for k, name in enumerate(CONTENDERS):
        values = [r.times.get(name, np.nan) for r in rows]
        if np.all(np.isnan(values)):
            continue
        ax_t.barh(y - 0.4 + height * (k + 0.5), values, height, label=name, color=colors[name])
    ax_t.set_xscale("log")
    ax_t.set_xlabel("median time per call (seconds, log scale)")
    ax_t.set_yticks(y, names)
    ax_t.invert_yaxis()
    ax_t.grid(axis="x", which="both", alpha=0.3)
    ax_t.legend(loc="lower right", fontsize="small")
    ax_t.set_title("time per call (shorter is faster)")

    ratios = [r.ratio if r.ratio is not None else np.nan for r in rows]
    bar_colors = [{True: "tab:green", False: "tab:red", None: "tab:gray"}[r.met] for r in rows]
    ax_r.barh(y, ratios, 0.6, color=bar_colors)
    targets = [r.case.target for r in rows]
    ax_r.scatter(targets, y, marker="|", s=300, color="black", zorder=3, label="target")
    ax_r.axvline(1.0, color="black", linewidth=0.8)
    ax_r.set_xscale("log")
    known = [v for v in ratios + targets if not np.isnan(v)]
    ax_r.set_xlim(min(known) / 1.5, max(known) * 3)  # room for the labels right of the bars
    ax_r.set_xlabel("speed-up: best peer's median / ours (log scale; > 1 is faster)")
    ax_r.grid(axis="x", which="both", alpha=0.3)
    ax_r.legend(loc="lower right", fontsize="small")
    ax_r.set_title("ratio (green: target met, red: missed, gray: no verdict)")
    for yi, ratio, target in zip(y, ratios, targets, strict=True):
        if not np.isnan(ratio):
            ax_r.annotate(
                _fmt_ratio(ratio),
                (max(ratio, target), yi),
                xytext=(5, 0),
                textcoords="offset points",
                va="center",
                fontsize="small",
            )
    fig.suptitle(
        f"numba_onnx_ops peer comparison ({rows[0].size if rows else 'full'} size)\n"
        + environment_line(env),
        fontsize="medium",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check_plot_available() -> str | None:
    """``None`` when ``--plot`` can work, else the message to show."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib: pip install 'numba_onnx_ops[bench]' (or matplotlib)"
    return None


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
