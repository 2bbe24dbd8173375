"""The cases of the peer comparison: what is compared, on which inputs.

Each case is one operator call, or one small model (op ``"Model"``, see :func:`chain_model`), on
seeded inputs of given dtypes and shapes, with the speed-up the project aims for (shown only by
``bench --targets``).  A case of a named group (:data:`GROUPS`) runs only when ``--cases`` selects
it, so that a plain ``bench`` stays minutes long.

A model runs on one of two runtimes (``Case.runtime``): our ``Backend`` (:data:`BACKEND`, against
onnxruntime), or onnx's ``ReferenceEvaluator`` with our MatMul and Pow (:data:`EVALUATOR`,
``ReferenceEvaluator(model, new_ops=numba_onnx_ops.reference.OPS)``), against the same evaluator
alone, ``ReferenceEvaluator(model)``: onnx's numpy implementation of every operator, shown in the
``numpy`` column.
"""

from __future__ import annotations

import difflib
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

import numpy as np

from ..runtime.cpu import cpu_features

Shape = tuple[int, ...]

#: Largest dimension of the ``tiny`` size: enough to reach every code path, too small to time.
TINY_DIM = 7

#: The runtimes of a ``"Model"`` case: our ``Backend``, whose peer is onnxruntime, or onnx's
#: ``ReferenceEvaluator`` with our MatMul and Pow (``new_ops=OPS``), whose peer is the same
#: evaluator alone (in the ``numpy`` column: it runs onnx's numpy implementation).
BACKEND = "Backend"
EVALUATOR = "evaluator"
MODEL_RUNTIMES = (BACKEND, EVALUATOR)

#: The GEMM group: float products of inference shapes on one and two threads, each shown with
#: its GFLOP/s beside the machine's FMA peak; run by ``--cases gemm``.
GEMM = "gemm"
#: The named groups, each run only when ``--cases`` selects it (its name selects them all).
GROUPS = (GEMM,)


@dataclass(frozen=True)
class Case:
    """One comparison: an operator on two inputs of given dtypes and shapes.

    ``exponent`` (Pow only) makes Y a 0-d array of that value; otherwise Y is random data of
    ``shapes[1]``.  ``quick_shapes`` replaces ``shapes`` under ``--quick`` where a peer would take
    seconds per call at full size.  ``bases`` (Pow only) picks another distribution of X than
    the default (see ``BASES``); ``threads`` runs every contender on that many threads.
    ``opset`` passes ``opset=`` to our call; ``python_exponent`` passes our call a 0-d exponent
    as a Python number, as numpy gets it (otherwise ours gets the 0-d array, as a model carries
    it).  A ``"Model"`` case runs :func:`chain_model`: X of ``shapes[0]``, two weights of
    ``shapes[1]``, Pow by ``exponent``, on ``runtime`` (one of :data:`MODEL_RUNTIMES`; only
    models have one).  ``group`` (one of :data:`GROUPS`) leaves the case out of a run that names
    no cases.
    """

    name: str
    op: str
    dtypes: tuple[str, str]
    shapes: tuple[Shape, Shape]
    target: float
    exponent: float | None = None
    quick_shapes: tuple[Shape, Shape] | None = None
    bases: str | None = None
    threads: int | None = None
    opset: int | None = None
    python_exponent: bool = False
    runtime: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        if self.op == "Model" and self.runtime not in MODEL_RUNTIMES:
            raise ValueError(f"{self.name}: a model's runtime is one of {MODEL_RUNTIMES}")
        if self.op != "Model" and self.runtime is not None:
            raise ValueError(f"{self.name}: only a model has a runtime")
        if self.group is not None and self.group not in GROUPS:
            raise ValueError(f"{self.name}: a group is one of {GROUPS}")

    def flop(self, size: str = "full") -> int | None:
        """A product's floating-point operations at ``size``, two per multiply-add (``None``
        for other operators): what its GFLOP/s are counted in."""
        if self.op != "MatMul":
            return None
        sa, sb = self.shapes_at(size)
        batch = math.prod(np.broadcast_shapes(sa[:-2], sb[:-2]))
        m = sa[-2] if len(sa) > 1 else 1  # a 1-D operand is one row (A) or one column (B)
        n = sb[-1] if len(sb) > 1 else 1
        return 2 * batch * m * n * sa[-1]

    def shapes_at(self, size: str) -> tuple[Shape, Shape]:
        if size == "quick" and self.quick_shapes is not None:
            return self.quick_shapes
        if size == "tiny":
            # min(d, TINY_DIM) keeps equal dimensions equal and 1s as 1s: broadcasting survives.
            return tuple(tuple(min(d, TINY_DIM) for d in s) for s in self.shapes)  # type: ignore[return-value]
        return self.shapes

    def label(self, size: str = "full") -> str:
        (sa, sb), (da, db) = self.shapes_at(size), self.dtypes
        notes = "".join(
            f", {note}"
            for note in (
                self.bases and f"{self.bases} bases",
                self.threads and f"{self.threads} thread" + "s" * (self.threads > 1),
                self.opset and f"opset={self.opset}",
                self.runtime == EVALUATOR and "ReferenceEvaluator",
            )
            if note
        )
        if self.op == "MatMul":
            return f"{da} {_fmt_shape(sa)} @ {_fmt_shape(sb)}{notes}"
        if self.op == "Model":
            w = _fmt_shape(sb)
            return f"{da} {_fmt_shape(sa)} @ {w}, ^ {self.exponent:g}, @ {w}{notes}"
        if self.exponent is not None:
            y = "Python" if self.python_exponent else db
            return f"{da} {_fmt_shape(sa)} ^ {y} {self.exponent:g}{notes}"
        return f"{da} {_fmt_shape(sa)} ^ {db} {_fmt_shape(sb)}{notes}"


def _on_cpu(avx512: float, other: float, feature: str = "avx512f") -> float:
    """The target where the CPU numba compiles for has ``feature``, else ``other``: some
    targets differ by CPU because the peers do (numpy's float ``power`` runs Intel SVML on
    AVX-512 and scalar libm elsewhere; 64-bit integer vector multiplies need AVX-512DQ)."""
    return avx512 if feature in cpu_features() else other


def _mm(name, dtype, a, b, target, quick=None, opset=None) -> Case:
    return Case(name, "MatMul", (dtype, dtype), (a, b), target, quick_shapes=quick, opset=opset)


def _pw(name, dtype, x, target, *, exponent=None, y_dtype=None, y_shape=(), **options) -> Case:
    dtypes = (dtype, y_dtype or dtype)
    return Case(name, "Pow", dtypes, (x, y_shape), target, exponent, **options)


def _call_pow(name, dtype, n, target, exponent, opset=None) -> Case:
    return _pw(name, dtype, (n,), target, exponent=exponent, python_exponent=True, opset=opset)


def _model(name, batch, width, target, runtime=BACKEND, quick_batch=None) -> Case:
    dims = ((batch, width), (width, width))
    quick = None if quick_batch is None else ((quick_batch, width), (width, width))
    dtypes = ("float32", "float32")
    return Case(name, "Model", dtypes, dims, target, 2.0, quick_shapes=quick, runtime=runtime)


# The models' sizes: (name, batch, width, Backend's target, batch under --quick).  At batch 1024
# and width 1024 a run takes tens of milliseconds and its check (two float64 runs per
# contender) half a second a contender: under --quick a batch of 64 keeps the weights and the
# paths of the full size (BLAS products, a Pow on the pool) at a sixteenth of the work.
_MODELS = (
    ("f32-b1-w64", 1, 64, 1.0, None),
    ("f32-b32-w256", 32, 256, 1.0, None),
    ("f32-b1024-w1024", 1024, 1024, 1.0, 64),
)


# The GEMM group's products, (name, dtype, A's shape, B's shape): a name's M x K x N is
# (M, K) @ (K, N), one number a cube.  Batches and widths of inference: a few rows through a
# layer (32x256x256, 8x1024x1024), tall and narrow (64x128x64), mid-size and square, float32
# mostly (the product numpy's BLAS takes for us today), float64, and the half types, whose
# products are our own kernels or sgemm on float32 panels; and a batch of 64 attention-like
# products in bfloat16.
_GEMMS = (
    ("f32-32x256x256", "float32", (32, 256), (256, 256)),
    ("f32-64x128x64", "float32", (64, 128), (128, 64)),
    ("f32-128x512x512", "float32", (128, 512), (512, 512)),
    ("f32-8x1024x1024", "float32", (8, 1024), (1024, 1024)),
    ("f32-256", "float32", (256, 256), (256, 256)),
    ("f32-1024", "float32", (1024, 1024), (1024, 1024)),
    ("f32-2048", "float32", (2048, 2048), (2048, 2048)),
    ("f32-1x768x3072", "float32", (1, 768), (768, 3072)),
    ("f32-16x3072x768", "float32", (16, 3072), (3072, 768)),
    ("f64-32x256x256", "float64", (32, 256), (256, 256)),
    ("f64-128x512x512", "float64", (128, 512), (512, 512)),
    ("f64-1024", "float64", (1024, 1024), (1024, 1024)),
    ("f16-512", "float16", (512, 512), (512, 512)),
    ("bf16-512", "bfloat16", (512, 512), (512, 512)),
    ("bf16-1024", "bfloat16", (1024, 1024), (1024, 1024)),
    ("bf16-32x256x256", "bfloat16", (32, 256), (256, 256)),
    ("bf16-batch64x128x64x128", "bfloat16", (64, 128, 64), (64, 64, 128)),
)
#: Thread counts of the GEMM rows: one core, and both of a two-core machine.
GEMM_THREADS = (1, 2)


def _gemm(name, dtype, a, b, threads) -> Case:
    # Target: the best peer's pace on every row, and 1.2 times it on two threads below the
    # large products (m up to 256), where the peers leave the second core idle or half used.
    dtypes = (dtype, dtype)
    target = 1.2 if threads == 2 and a[-2] <= 256 else 1.0
    return Case(
        f"gemm-{name}-{threads}t", "MatMul", dtypes, (a, b), target, threads=threads, group=GEMM
    )


_SQ = (1024, 1024)
_SQ_QUICK = ((256, 256), (256, 256))  # numpy's half-type matmul is a scalar loop: 7 s at 1024
_X = (1000, 10_000)  # 10 million elements
_ONE_THREAD = _on_cpu(1.0, 3.0)

#: The cases, each with the speed-up over the best peer it aims for (``bench --targets``).
CASES: tuple[Case, ...] = (
    _mm("matmul-f32-1024", "float32", _SQ, _SQ, 0.97),
    _mm("matmul-f64-1024", "float64", _SQ, _SQ, 0.97),
    _mm("matmul-f32-256", "float32", (256, 256), (256, 256), 0.97),
    _mm("matmul-f16-1024", "float16", _SQ, _SQ, 1.15, quick=_SQ_QUICK),
    _mm("matmul-bf16-1024", "bfloat16", _SQ, _SQ, 1.15, quick=_SQ_QUICK),
    _mm("matmul-i32-512", "int32", (512, 512), (512, 512), 3.0),
    _mm("matmul-u32-512", "uint32", (512, 512), (512, 512), 3.0),
    _mm("matmul-i64-512", "int64", (512, 512), (512, 512), _on_cpu(4.0, 2.5, "avx512dq")),
    _mm("matmul-f32-batch4096x8x8", "float32", (4096, 8, 8), (4096, 8, 8), 3.0),
    _mm("matmul-f32-batch2048x16x16", "float32", (2048, 16, 16), (2048, 16, 16), 2.0),
    _mm("matmul-f32-batch64x128x64", "float32", (64, 128, 64), (64, 64, 128), 1.5),
    _mm("matmul-f32-bcast8x8x256", "float32", (8, 1, 256, 256), (1, 8, 256, 256), 1.2),
    _mm("matmul-f32-matvec4096", "float32", (4096, 4096), (4096,), 0.97),
    _mm("matmul-f32-vecmat4096", "float32", (1, 4096), (4096, 4096), 0.97),
    _mm("matmul-f32-4x4", "float32", (4, 4), (4, 4), 0.5),
    _pw("pow-f32-e2", "float32", _X, 1.0, exponent=2.0),
    _pw("pow-f32-e3.7", "float32", _X, 3.0, exponent=3.7),
    _pw("pow-f32-e0.5", "float32", _X, 2.0, exponent=0.5),
    _pw("pow-f32-same", "float32", _X, 3.0, y_shape=_X),
    _pw("pow-f32-row", "float32", _X, 3.0, y_shape=(_X[1],)),
    _pw("pow-f64-e3.7", "float64", _X, 1.5, exponent=3.7),
    _pw("pow-i32-e3", "int32", _X, 1.0, exponent=3),
    _pw("pow-i64-e3", "int64", _X, 1.0, exponent=3),
    _pw("pow-f16-e2", "float16", _X, 2.0, exponent=2.0),
    _pw("pow-f16-e3.7", "float16", _X, 8.0, exponent=3.7),
    _pw("pow-f16-e-1.5", "float16", _X, 8.0, exponent=-1.5),
    _pw("pow-f16-e0.5", "float16", _X, 4.0, exponent=0.5),
    _pw("pow-f32-i64e2", "float32", _X, 1.0, exponent=2, y_dtype="int64"),
    _pw("pow-bf16-f32e3.7", "bfloat16", _X, 8.0, exponent=3.7, y_dtype="float32"),
    _pw("pow-bf16-e0.75", "bfloat16", _X, 8.0, exponent=0.75),
    # One thread each: at least numpy's pace where it runs Intel SVML (AVX-512), three times
    # the best peer's where it runs scalar libm.
    _pw("pow-1t-f32-e3.7", "float32", _X, _ONE_THREAD, exponent=3.7, threads=1),
    _pw("pow-1t-f32-same", "float32", _X, _ONE_THREAD, y_shape=_X, threads=1),
    _pw("pow-1t-f64-e3.7", "float64", _X, _ONE_THREAD, exponent=3.7, threads=1),
    _pw("pow-1t-f64-same", "float64", _X, _ONE_THREAD, y_shape=_X, threads=1),
    # Other distributions of the base: compare with pow-f32-e3.7 and pow-f64-e3.7 for the
    # spread of our own times.
    *(
        _pw(f"pow-{b}-{t}-e3.7", dtype, _X, target, exponent=3.7, bases=b)
        for t, dtype, target in (("f32", "float32", 3.0), ("f64", "float64", 1.5))
        for b in ("near1", "wide", "negative")
    ),
    # The cost of a call on small tensors, against numpy's (the best peer there): most of it is
    # the front layer's, not the kernel's.  Python exponents, as a numpy user writes them.
    _call_pow("call-pow16-f32-e2", "float32", 16, 1 / 3, 2.0),
    _call_pow("call-pow16-f32-e2-opset15", "float32", 16, 1 / 3, 2.0, opset=15),
    _call_pow("call-pow16-f32-e3.7", "float32", 16, 1 / 3, 3.7),
    _call_pow("call-pow16-f32-e3.7-opset15", "float32", 16, 1 / 3, 3.7, opset=15),
    _pw("call-pow16-f32-same-opset15", "float32", (16,), 1 / 3, y_shape=(16,), opset=15),
    _call_pow("call-pow64-f16-e3.7", "float16", 64, 1 / 3, 3.7),
    _call_pow("call-pow16-i32-e3", "int32", 16, 1 / 3, 3),
    _call_pow("call-pow4096-f32-e3.7", "float32", 4096, 1.0, 3.7),
    _mm("call-matmul4x4-f32-opset13", "float32", (4, 4), (4, 4), 0.5, opset=13),
    _mm("call-matmul1x64x64-f32-opset13", "float32", (1, 64), (64, 64), 0.5, opset=13),
    _mm("call-matmul8x8-i32", "int32", (8, 8), (8, 8), 0.5),
    # Models through the Backend, against onnxruntime (its best peer).
    *(_model(f"model-{n}", b, w, target, quick_batch=q) for n, b, w, target, q in _MODELS),
    # The same models in onnx's ReferenceEvaluator with our MatMul and Pow, against the
    # evaluator alone (its numpy implementation, in the numpy column): never slower.
    *(_model(f"model-eval-{n}", b, w, 1.0, EVALUATOR, q) for n, b, w, _, q in _MODELS),
    # The GEMM group (``--cases gemm``): each product on one thread, then on two.
    *(_gemm(*gemm, threads) for gemm in _GEMMS for threads in GEMM_THREADS),
)

#: Distributions of Pow bases (floats): near 1, magnitudes over 2**-30..2**30 (log-uniform,
#: so that x ** 3.7 stays finite in float32), and uniform over [-4, 4) (half of them negative,
#: NaN for a fractional exponent).
BASES = {
    "near1": lambda rng, n: rng.uniform(0.9, 1.1, n),
    "wide": lambda rng, n: np.exp2(rng.uniform(-30.0, 30.0, n)),
    "negative": lambda rng, n: rng.uniform(-4.0, 4.0, n),
}


@dataclass(frozen=True)
class Spread:
    """A target on our own times alone: over ``cases``, which differ only in how their inputs
    are distributed, the slowest median is at most ``limit`` times the fastest (shown by
    ``bench --targets`` when all of them ran)."""

    name: str
    cases: tuple[str, ...]
    limit: float

    def ratio(self, medians: dict[str, float]) -> float:
        """Slowest over fastest of ``medians`` (seconds by case name)."""
        return max(medians.values()) / min(medians.values())

    def met(self, medians: dict[str, float]) -> bool:
        """Whether the spread of ``medians`` is within the limit."""
        return self.ratio(medians) <= self.limit


SPREADS = tuple(
    Spread(
        f"{dtype} ^ 3.7 over bases", (f"pow-{t}-e3.7", *(f"pow-{b}-{t}-e3.7" for b in BASES)), 1.3
    )
    for t, dtype in (("f32", "float32"), ("f64", "float64"))
)


@dataclass(frozen=True)
class FirstCall:
    """A target on latency: the call that compiles a kernel, in a fresh process with an empty
    numba cache, takes at most ``limit`` seconds (shown by ``bench --targets``).  ``setup``
    builds the inputs, untimed, with ``np``, ``ml_dtypes``, ``matmul`` and ``pow`` imported."""

    name: str
    label: str
    setup: str
    call: str
    limit: float

    def met(self, times: Sequence[float]) -> bool:
        """Whether the median of ``times`` (seconds) is within the limit."""
        return statistics.median(times) <= self.limit


FIRST_CALLS = (
    FirstCall(
        "first-pow-f32-e3.7",
        "float32 ^ 3.7",
        "x = np.linspace(0.5, 2, 1000, dtype=np.float32); y = np.float32(3.7)",
        "pow(x, y)",
        3.0,
    ),
    FirstCall(
        "first-pow-f64-e3.7",
        "float64 ^ 3.7",
        "x = np.linspace(0.5, 2, 1000); y = np.float64(3.7)",
        "pow(x, y)",
        3.0,
    ),
    FirstCall(
        "first-pow-f16-f16",
        "float16 ^ float16",
        "x = np.linspace(0.5, 2, 1000).astype(np.float16); y = x[::-1].copy()",
        "pow(x, y)",
        3.0,
    ),
    FirstCall(
        "first-matmul-i32",
        "int32 (64,64) @ (64,64)",
        "a = np.ones((64, 64), np.int32)",
        "matmul(a, a)",
        3.0,
    ),
    FirstCall(
        "first-matmul-i32-packed",
        "int32 (64,8192) @ (8192,64), packed",
        "a = np.ones((64, 8192), np.int32); b = np.ones((8192, 64), np.int32)",
        "matmul(a, b)",
        3.0,
    ),
    FirstCall(
        "first-matmul-f32-batch",
        "float32 (2048,16,16) @ (2048,16,16)",
        "a = np.ones((2048, 16, 16), np.float32)",
        "matmul(a, a)",
        1.5,
    ),
    # A mid-size float product, on the pool's micro-kernel: numpy's BLAS compiles nothing, and
    # the own GEMM aims at most a second more.
    FirstCall(
        "first-matmul-f32",
        "float32 (256,256) @ (256,256)",
        "a = np.ones((256, 256), np.float32)",
        "matmul(a, a)",
        1.0,
    ),
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


#: Every name ``--cases`` can select: the cases', then the first-call targets'.
_NAMES: tuple[str, ...] = tuple(c.name for c in CASES) + tuple(f.name for f in FIRST_CALLS)


def select_cases(patterns: Sequence[str] | None) -> list[Case]:
    """The cases that ``patterns`` select (see :func:`select`), in table order; a pattern may
    also select only first-call targets (:func:`select_first_calls`).

    Raises
    ------
    ValueError
        If a pattern selects neither a case nor a first-call target.
    """
    return select(patterns)[0]


def select_first_calls(patterns: Sequence[str] | None) -> list[FirstCall]:
    """The first-call targets that ``patterns`` select (all of them without patterns)."""
    if not patterns:
        return list(FIRST_CALLS)
    return [f for f in FIRST_CALLS if any(_matches(f.name, p) for p in patterns)]


def select(patterns: Sequence[str] | None) -> tuple[list[Case], list[FirstCall]]:
    """The cases and the first-call targets that ``patterns`` select, each in table order
    (without patterns: every case outside a group, and every first-call target).

    A pattern that is a name selects that one entry alone, so that the name of a row reruns
    that row and no other whose name contains it (``pow-f32-e3.7``, ``first-pow-f32-e3.7``);
    any other pattern selects every name it matches as a glob or contains, in a group or not
    (``gemm``: the GEMM group's cases, whose names start with it; ``*``: everything).

    Raises
    ------
    ValueError
        If a pattern selects nothing.
    """
    if not patterns:
        return [c for c in CASES if c.group is None], list(FIRST_CALLS)
    unmatched = [p for p in patterns if not any(_matches(n, p) for n in _NAMES)]
    if unmatched:
        near = [n for p in unmatched for n in difflib.get_close_matches(p, _NAMES, 3)]
        hint = f"; near: {', '.join(dict.fromkeys(near))}" if near else ""
        raise ValueError(
            f"no case matches {', '.join(map(repr, unmatched))}{hint}; --list names them"
        )
    return (
        [c for c in CASES if any(_matches(c.name, p) for p in patterns)],
        [f for f in FIRST_CALLS if any(_matches(f.name, p) for p in patterns)],
    )


def first_calls_only(patterns: Sequence[str] | None) -> dict[str, list[str]]:
    """The patterns that select first-call targets and no case, each with the names of those
    targets: what a run that does not time first calls would run nothing for."""
    return {
        p: [f.name for f in FIRST_CALLS if _matches(f.name, p)]
        for p in patterns or ()
        if not any(_matches(c.name, p) for c in CASES)
        and any(_matches(f.name, p) for f in FIRST_CALLS)
    }


def _matches(name: str, pattern: str) -> bool:
    if pattern in _NAMES:  # a name: that entry alone
        return name == pattern
    return fnmatchcase(name, pattern) or pattern in name


def make_inputs(case: Case, size: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded inputs of ``case`` at ``size``: small integers, floats of moderate magnitude.

    Pow bases are positive (a non-integer power of a negative base is NaN, the special-value path);
    integer bases in [-1000, 1000) cube without overflow.  A ``"Model"`` case's second input
    holds its two weights, stacked.
    """
    rng = np.random.default_rng(seed)
    (sa, sb), (da, db) = case.shapes_at(size), (np.dtype(d) for d in case.dtypes)
    if case.op == "Model":
        sb = (2, *sb)
    if case.op in ("MatMul", "Model"):
        return _random(rng, sa, da, (-1.0, 1.0), (-100, 100)), _random(
            rng, sb, db, (-1.0, 1.0), (-100, 100)
        )
    if case.bases is not None:
        x = BASES[case.bases](rng, math.prod(sa)).astype(da).reshape(sa)
    else:
        x = _random(rng, sa, da, (0.25, 4.0), (-1000, 1000))
    if case.exponent is not None:
        return x, np.asarray(case.exponent).astype(db)
    return x, _random(rng, sb, db, (-3.0, 3.0), (0, 4))


#: The opset of :func:`chain_model`: MatMul-13 and Pow-15, the newest versions.
MODEL_OPSET = 15


def chain_model(weights: np.ndarray, exponent: float, opset: int = MODEL_OPSET):
    """The model of a ``"Model"`` case: ``y = ((x @ weights[0]) ** exponent) @ weights[1]``.

    The weights and the exponent (of the weights' dtype) are initializers, as a trained model
    carries them; ``x`` is the one input, of any batch size.  Needs onnx.

    Returns
    -------
    onnx.ModelProto
    """
    from onnx import helper, numpy_helper

    elem, width = helper.np_dtype_to_tensor_dtype(weights.dtype), weights.shape[-1]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Pow", ["h", "e"], ["p"]),
        helper.make_node("MatMul", ["p", "w2"], ["y"]),
    ]
    initializers = [
        numpy_helper.from_array(weights[0], "w1"),
        numpy_helper.from_array(np.asarray(exponent).astype(weights.dtype), "e"),
        numpy_helper.from_array(weights[1], "w2"),
    ]
    graph = helper.make_graph(
        nodes,
        "matmul_pow_matmul",
        [helper.make_tensor_value_info("x", elem, ["batch", width])],
        [helper.make_tensor_value_info("y", elem, ["batch", width])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # onnxruntime reads IR <= 11; onnx may write a newer one
    return model


def _random(rng, shape, dtype, float_range, int_range) -> np.ndarray:
    if dtype.kind in "iu":
        lo = max(int_range[0], 0) if dtype.kind == "u" else int_range[0]
        return rng.integers(lo, int_range[1], size=shape).astype(dtype)
    return rng.uniform(*float_range, size=shape).astype(dtype)


def _fmt_shape(shape: Shape) -> str:
    return "(" + ",".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
