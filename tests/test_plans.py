"""Call plans: a call of ndarrays, without ``out`` or with an ndarray one, makes its kind's plan
once and runs it on every later call of that kind.

For every kind of call the plans serve (each dtype, exponent class, shape, layout and opset,
small calls on the calling thread and large ones on the pool), the call that makes the plan,
the calls that run it, a call with ``out`` and the general path (an ``out`` of an ndarray
subclass, which decides everything again) give the same bits.  A call of another kind (dtype,
shape, layout, opset, exponent value) never runs a plan made for another, errors are raised on
every call and leave no plan behind, the caches stay bounded, threads share plans safely, and
small calls run on the calling thread.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import math

import ml_dtypes
import numpy as np
import pytest
from oracles import (
    BF16,
    F16,
    F32,
    F64,
    I8,
    I32,
    I64,
    U8,
    U32,
    U64,
    assert_matmul_close,
    assert_pow_matches,
    dtype_id,
    is_int,
    matmul_exact_int,
)
from spies import GeneralOut

import numba_onnx_ops as nox

plans = importlib.import_module("numba_onnx_ops.core.plans")
pow_api = importlib.import_module("numba_onnx_ops.ops.pow.api")
matmul_api = importlib.import_module("numba_onnx_ops.ops.matmul.api")
pow_kernels = importlib.import_module("numba_onnx_ops.ops.pow.kernels")
tuning = importlib.import_module("numba_onnx_ops.tuning")

POW_X = (F16, F32, F64, BF16, I32, I64)  # every X dtype of Pow-15
MATMUL_TYPES = (F16, F32, F64, BF16, I32, I64, U32, U64)  # every dtype of MatMul-13


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def _same_bits(actual: np.ndarray, expected: np.ndarray, what="") -> None:
    """Equal dtype, shape and bytes (NaN payloads and signed zeros included)."""
    assert type(actual) is np.ndarray, what
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.tobytes() == expected.tobytes(), f"{what}: the bits differ"


def _out_shape(op, a, b) -> tuple[int, ...]:
    """The result's shape (numpy's broadcasting or matmul's)."""
    if op is nox.pow:
        return np.broadcast_shapes(np.shape(a), np.shape(b))
    return np.matmul(np.zeros(np.shape(a), np.int8), np.zeros(np.shape(b), np.int8)).shape


def _general(op, a, b, shape=None, **kwargs) -> np.ndarray:
    """``op`` on the general path, which makes every decision again and keeps no plan: with
    an ``out`` that is not a plain ndarray.  ``shape``: the result's (by default
    ``_out_shape``'s)."""
    dtype = np.asarray(a).dtype.newbyteorder("=")
    out = np.empty(shape or _out_shape(op, a, b), dtype).view(GeneralOut)
    assert op(a, b, out=out, **kwargs) is out
    return out.view(np.ndarray)


def _into(op, a, b, shape=None, **kwargs) -> np.ndarray:
    """``op`` with a plain ndarray ``out``: the plans of calls with ``out``."""
    dtype = np.asarray(a).dtype.newbyteorder("=")
    out = np.empty(shape or _out_shape(op, a, b), dtype)
    assert op(a, b, out=out, **kwargs) is out
    return out


def _cache_of(op) -> dict:
    return (pow_api if op is nox.pow else matmul_api)._PLANS


def assert_plan_agrees(op, a, b, what="", **kwargs) -> np.ndarray:
    """The call that makes the plan (a miss), one that runs it (a hit) and the general path
    give the same bits; the first call keeps one plan, the others none.  The result."""
    cache = _cache_of(op)
    plans.clear()
    first = op(a, b, **kwargs)
    assert len(cache) == 1, f"{what}: the call kept no plan"
    (plan,) = cache.values()
    again = op(a, b, **kwargs)
    assert len(cache) == 1 and next(iter(cache.values())) is plan, f"{what}: not a hit"
    general = _general(op, a, b, first.shape, **kwargs)
    into = _into(op, a, b, first.shape, **kwargs)
    assert len(cache) == 1, f"{what}: out= kept a plan among those without"
    _same_bits(again, first, what=f"{what} (the hit)")
    _same_bits(general, first, what=f"{what} (the general path)")
    _same_bits(into, first, what=f"{what} (with out=)")
    return first


def run_planned(op, a, b, what="", **kwargs):
    """``op(a, b)`` as a call of a new kind: (its result, the plan it made and kept)."""
    cache = _cache_of(op)
    before = {id(p) for p in cache.values()}
    result = op(a, b, **kwargs)
    made = [p for p in cache.values() if id(p) not in before]
    assert len(made) == 1, f"{what}: the call ran a plan made for another kind of call"
    return result, made[0]


def unaligned(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` at an address off its element size."""
    raw = np.zeros(a.nbytes + 1, np.uint8)
    u = raw[1:].view(a.dtype).reshape(a.shape)
    u[...] = a
    assert not u.flags.aligned
    return u


def readonly(a: np.ndarray) -> np.ndarray:
    c = a.copy()
    c.flags.writeable = False
    return c


def strided(a: np.ndarray, step: int = 2) -> np.ndarray:
    """``a``'s values, every ``step``-th element of a larger array along every axis."""
    big = np.zeros(tuple(step * n for n in a.shape), a.dtype)
    view = big[(slice(None, None, step),) * a.ndim]
    view[...] = a
    return view


def negative(a: np.ndarray) -> np.ndarray:
    """``a``'s values, with negative strides along every axis."""
    flipped = (slice(None, None, -1),) * a.ndim
    return a[flipped].copy()[flipped]


LAYOUTS = {
    "C": lambda a: a.copy(),
    "F": np.asfortranarray,
    "strided": strided,
    "negative": negative,
    "readonly": readonly,
    "unaligned": unaligned,
}


def pow_base(rng, shape, dtype) -> np.ndarray:
    """Bases of ``dtype``: integers of both signs, or floats of both signs with zeros of both
    signs, infinities, NaN and subnormals among them."""
    if is_int(dtype):
        return rng.integers(-40, 40, shape).astype(dtype)
    x = rng.uniform(-3, 3, shape)
    tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal)
    flat = x.reshape(-1)
    specials = [0.0, -0.0, math.inf, -math.inf, math.nan, tiny, -tiny, 1.0, -1.0]
    flat[::7] = np.resize(specials, flat[::7].shape)
    return x.astype(dtype)


def pow_exponents(rng, shape, dtype) -> np.ndarray:
    """Exponent arrays of ``dtype``: small integers, or floats with integers among them."""
    if is_int(dtype):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -5), min(info.max, 9), shape).astype(dtype)
    y = rng.uniform(-4, 4, shape)
    y.reshape(-1)[::3] = np.round(y.reshape(-1)[::3])
    return y.astype(dtype)


def matmul_operand(rng, shape, dtype) -> np.ndarray:
    if is_int(dtype):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return rng.uniform(-2, 2, shape).astype(dtype)


# ------------------------------------------------------------------------------------------
# every kind of call: the miss, the hit and the general path agree bit for bit
# ------------------------------------------------------------------------------------------
def _pow_here_max() -> dict[str, int]:
    """The most result elements each exponent class computes on the calling thread
    (``tuning.POW_HERE_MAX``, at most one chunk)."""
    return {c: min(n, pow_kernels.CHUNK) for c, n in tuning.POW_HERE_MAX.items()}


def _pow_shapes() -> list[tuple[int, ...]]:
    """Bases of 16 and 1000 elements (the calling thread), of just as many elements as each
    exponent class computes on the calling thread and of one more (the pool), and an N-D one
    larger than all of them (the pool); 1-D and N-D."""
    edges = sorted(set(_pow_here_max().values()))
    shapes = [(16,), (10, 100)]
    for n in edges:
        shapes += [(n,), (n + 1,)]
    return shapes + [(4, 50, max(100, edges[-1] // 200 + 1))]


PY_EXPONENTS = [2.0, 3.0, 0.5, -1.0, -0.5, 5.0, -3.0, 3.7, 0.0, 1.0, math.nan, math.inf, -math.inf,
                2, 3, 5, -3, 0, 1, 2**40, 2**63 + 5]  # fmt: skip
NP_EXPONENTS = [np.float32(2), np.float64(3.7), np.int32(3), np.int64(-3), np.float16(0.5),
                BF16.type(-1.0), np.uint8(1), np.float64(0.0)]  # fmt: skip


def test_the_grids_reach_both_places():
    """The sizes above sit on both sides of every class's crossover: at it and just past it,
    in 1-D, and an N-D base on either side."""
    sizes = {s: math.prod(s) for s in _pow_shapes()}
    for most in _pow_here_max().values():
        assert most in sizes.values() and most + 1 in sizes.values()
        assert any(len(s) > 1 and n <= most for s, n in sizes.items())
        assert any(len(s) > 1 and n > most for s, n in sizes.items())


def assert_unplanned_agrees(op, a, b, what="", **kwargs) -> np.ndarray:
    """A call that keeps no plan (it takes the general path every time): it and a repeat
    give the general path's bits.  The result."""
    cache = _cache_of(op)
    plans.clear()
    first = op(a, b, **kwargs)
    again = op(a, b, **kwargs)
    assert len(cache) == 0, f"{what}: the call kept a plan"
    general = _general(op, a, b, first.shape, **kwargs)
    _same_bits(again, first, what=f"{what} (again)")
    _same_bits(general, first, what=f"{what} (the general path)")
    return first


@pytest.mark.parametrize("dtype", POW_X, ids=dtype_id)
def test_pow_plans_of_every_exponent(dtype, rng):
    """Python and numpy scalar exponents of every class, same-shape exponent arrays of several
    dtypes, broadcast and one-element exponent arrays, at every size."""
    for shape in _pow_shapes():
        x = pow_base(rng, shape, dtype)
        for y in PY_EXPONENTS + NP_EXPONENTS:
            what = f"{dtype} {shape} ** {y!r}"
            if type(y) is int and y > 2**63 - 1:  # a Python int is an int64 from Pow-12 on
                with pytest.raises(OverflowError):
                    nox.pow(x, y)
            elif type(y) is float and math.isnan(y):
                # (a NaN object is not equal to itself: no key finds a plan, none is kept)
                assert_unplanned_agrees(nox.pow, x, y, what=what)
            else:
                assert_plan_agrees(nox.pow, x, y, what=what)
        arrays = [pow_exponents(rng, shape, yd) for yd in (dtype, F64, I32, U8, BF16)]
        arrays += [
            pow_exponents(rng, shape[-1:], F32),  # a row, broadcast
            pow_exponents(rng, (1,) * len(shape), dtype),  # one element, broadcast
            np.array(3.0, dtype),  # 0-d
            np.array([0.5], F64),
        ]
        for y in arrays:
            assert_plan_agrees(nox.pow, x, y, what=f"{dtype} {shape} ** {y.dtype} {y.shape}")


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [F32, F16, I64], ids=dtype_id)
def test_pow_plans_of_every_layout(dtype, layout, rng):
    """Bases and exponent arrays in every layout: contiguous, Fortran order, strided,
    negative strides, read-only and unaligned, on both sides of the crossovers."""
    make = LAYOUTS[layout]
    for shape in [(16,), (4, 6), (2, 3000), (4, 50, 100)]:
        x = make(pow_base(rng, shape, dtype))
        for y in (2.0, 3.7, -1):
            assert_plan_agrees(nox.pow, x, y, what=f"{layout} {shape} ** {y}")
        for y in (make(pow_exponents(rng, shape, F32)), pow_exponents(rng, shape, dtype)):
            assert_plan_agrees(nox.pow, x, y, what=f"{layout} {shape} ** array {y.dtype}")
        y = make(pow_exponents(rng, shape[-1:], dtype))
        assert_plan_agrees(nox.pow, x, y, what=f"{layout} {shape} ** row")
        xc = pow_base(rng, shape, dtype)
        assert_plan_agrees(nox.pow, xc, make(pow_exponents(rng, shape, dtype)), what=layout)


#: (opset, the X dtypes its version allows)
POW_OPSETS = [
    (1, (F16, F32, F64)),
    (7, (F16, F32, F64)),
    (12, (F16, F32, F64, I32, I64)),
    (13, POW_X),
    (15, POW_X),
]


@pytest.mark.parametrize(("opset", "xdtypes"), POW_OPSETS, ids=[str(o) for o, _ in POW_OPSETS])
def test_pow_plans_of_every_opset(opset, xdtypes, rng):
    for dtype in xdtypes:
        for shape in [(2, 3, 4, 5), (4, 50, 100)]:
            x = pow_base(rng, shape, dtype)
            ydtype = F32 if dtype == BF16 and opset < 15 else dtype  # (Pow-13's Y: no bfloat16)
            same = pow_exponents(rng, shape, ydtype)
            legacy = {"broadcast": 1} if opset == 1 else {}
            what = f"Pow-{opset} {dtype} {shape}"
            for y in (2.0, 3.7, 3, np.array(0.5, ydtype)):
                assert_plan_agrees(nox.pow, x, y, what=f"{what} ** {y}", opset=opset, **legacy)
            assert_plan_agrees(nox.pow, x, same, what=what, opset=opset)
            if opset == 1:
                legal = [(shape[1:3], 1), (shape[:1], 0), (shape[-1:], None), ((1,), -len(shape))]
                for y, axis in legal:
                    ys = pow_exponents(rng, y, dtype)
                    kw = {"broadcast": 1} if axis is None else {"broadcast": 1, "axis": axis}
                    assert_plan_agrees(nox.pow, x, ys, what=f"{what} {kw}", opset=1, **kw)
                assert_plan_agrees(nox.pow, x, same, what=what, opset=1, broadcast=0)
            else:
                row = pow_exponents(rng, shape[-1:], ydtype)
                assert_plan_agrees(nox.pow, x, row, what=f"{what} row", opset=opset)
            if opset >= 12:
                mixed = pow_exponents(rng, shape, F32 if is_int(dtype) else I64)
                assert_plan_agrees(nox.pow, x, mixed, what=f"{what} mixed", opset=opset)


def _matmul_work(sa, sb) -> int:
    """Multiply-adds of ``A @ B`` for operands of shapes ``sa`` and ``sb``."""
    a2 = (1,) + sa if len(sa) == 1 else sa
    b2 = sb + (1,) if len(sb) == 1 else sb
    nbatch = math.prod(np.broadcast_shapes(a2[:-2], b2[:-2]))
    return nbatch * a2[-2] * a2[-1] * b2[-1]


def _matmul_limits() -> dict:
    """The most multiply-adds an own-kernel product runs on the calling thread, by dtype."""
    return {
        dtype: tuning.MATMUL_HERE_MAX_INT64 if np.dtype(dtype).itemsize == 8 and is_int(dtype)
        else tuning.MATMUL_HERE_MAX
        for dtype in MATMUL_TYPES
    }  # fmt: skip


def _side(work: int, count: int = 1) -> int:
    """The least ``s`` with ``count * s**3 > work``."""
    s = max(1, round((work / count) ** (1 / 3)) - 1)
    while count * s**3 <= work:
        s += 1
    return s


def _at_and_past(limit: int):
    """(A shape, B shape) of ``limit`` multiply-adds or a few fewer, and of a few more."""
    s = 1 << (limit.bit_length() - 1) // 3  # (a power of two: 2**19 is exactly 64 * 64 * 128)
    n = limit // (s * s)
    return ((s, s), (s, n)), ((s, s), (s, n + 1))


def _matmul_shapes():
    """(A shape, B shape): vectors, 2-D, batched and broadcast batches, in three groups:
    ``small``, on the calling thread for every dtype (at most ``tuning.MATMUL_HERE_MAX`` and
    ``MATMUL_HERE_MAX_INT64``, 64-bit integers' crossover, multiply-adds); ``edges``, at each
    crossover (or a little below) and just past it; ``large``, on the pool for every dtype
    (more than both)."""
    small = [((7,), (7, 5)), ((6, 7), (7,)), ((7,), (7,)), ((6, 7), (7, 5)), ((8, 8), (8, 8)),
             ((3, 6, 7), (3, 7, 5)), ((2, 1, 6, 7), (3, 7, 5)), ((6, 7), (2, 7, 5))]  # fmt: skip
    limits = sorted(set(_matmul_limits().values()))
    edges = [shapes for limit in limits for shapes in _at_and_past(limit)]
    top = limits[-1]
    k, s1, s4, s6 = 512, _side(top), _side(top, 4), _side(top, 6)
    large = [((k,), (k, top // k + 1)), ((top // k + 1, k), (k,)), ((s1, s1), (s1, s1)),
             ((4, s4, s4), (4, s4, s4)), ((2, 1, s6, s6), (3, s6, s6))]  # fmt: skip
    return small, edges, large


def test_the_matmul_shapes_reach_both_places():
    small, edges, large = _matmul_shapes()
    limits = set(_matmul_limits().values())
    for shapes, here in ((small, True), (large, False)):
        for sa, sb in shapes:
            assert all((_matmul_work(sa, sb) <= n) == here for n in limits), (sa, sb)
    works = [_matmul_work(sa, sb) for sa, sb in edges]
    for n in limits:  # at (or a little below) each crossover, and just past it
        assert min(w for w in works if w > n) - max(w for w in works if w <= n) <= n // 8, n


@pytest.mark.parametrize("dtype", MATMUL_TYPES, ids=dtype_id)
def test_matmul_plans_of_every_shape(dtype, rng):
    small, edges, large = _matmul_shapes()
    for sa, sb in small + edges + large:
        a, b = matmul_operand(rng, sa, dtype), matmul_operand(rng, sb, dtype)
        assert_plan_agrees(nox.matmul, a, b, what=f"{dtype} {sa} @ {sb}")


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [F32, BF16, I32, U64], ids=dtype_id)
def test_matmul_plans_of_every_layout(dtype, layout, rng):
    make = LAYOUTS[layout]
    shapes = [((6, 7), (7, 9)), ((3, 6, 7), (3, 7, 9)), ((60, 70), (70, 50)), ((70,), (70, 9))]
    for sa, sb in shapes:
        a, b = matmul_operand(rng, sa, dtype), matmul_operand(rng, sb, dtype)
        for x, y in ((make(a), b), (a, make(b)), (make(a), make(b))):
            assert_plan_agrees(nox.matmul, x, y, what=f"{layout} {sa} @ {sb}")
        if a.ndim == 2:  # (B.T @ A.T: transposed views, and copies of them in the layout)
            assert_plan_agrees(nox.matmul, b.T, a.T, what=f"transposed {sa} @ {sb}")
            bt, at = make(b.T.copy()), make(a.T.copy())
            assert_plan_agrees(nox.matmul, bt, at, what=f"{layout} transposed {sa} @ {sb}")


@pytest.mark.parametrize("opset", [1, 9, 13])
def test_matmul_plans_of_every_opset(opset, rng):
    allowed = {1: (F16, F32, F64), 9: (F16, F32, F64, I32, I64, U32, U64), 13: MATMUL_TYPES}
    for dtype in allowed[opset]:
        for sa, sb in [((6, 7), (7, 5)), ((2, 6, 7), (7, 5)), ((64, 64), (64, 64))]:
            a, b = matmul_operand(rng, sa, dtype), matmul_operand(rng, sb, dtype)
            assert_plan_agrees(nox.matmul, a, b, what=f"MatMul {opset} {dtype}", opset=opset)


# ------------------------------------------------------------------------------------------
# a plan runs only calls of its own kind
# ------------------------------------------------------------------------------------------
def _pow_expected(x, y, opset=None, broadcast=None, axis=None):
    """The oracle's operands of ``pow(x, y, ...)``: the exponent typed as the version types
    it, and aligned with ``x`` under Pow-1's broadcast."""
    version = nox.resolve_version("Pow", opset)
    if not isinstance(y, np.ndarray | np.generic):
        if version < 12:  # Pow-1 and Pow-7: a Python scalar takes X's dtype
            return x, np.array(y, x.dtype)
        return x, np.array(y, np.float64 if type(y) is float else np.int64)
    y = np.asarray(y)
    if version == 1 and broadcast == 1 and y.size > 1:
        start = x.ndim - y.ndim if axis is None else axis % x.ndim
        y = y.reshape((1,) * start + y.shape + (1,) * (x.ndim - start - y.ndim))
    return x, y


def _assert_pow_right(result, x, y, what="", **kwargs):
    xs, ys = _pow_expected(x, y, **kwargs)
    assert_pow_matches(result, xs, ys, what=what)


def _pow_variants(rng):
    """(name, base, exponent, keywords) calls, each of its own kind: the first is the kind the
    others differ from, each in one part of the key (or in several, where one cannot change
    alone)."""
    x = np.abs(pow_base(rng, (1000,), F32)) + 0.5
    x[np.isnan(x)] = 2.0
    xi = rng.integers(-9, 9, (1000,)).astype(I32)
    cube, edge = x.reshape(10, 10, 10), pow_exponents(rng, (10,), F32)
    legacy = {"opset": 1, "broadcast": 1}
    same = pow_exponents(rng, x.shape, F32)
    return [
        ("base", x, 2.0, {}),
        # dtype
        ("float64", x.astype(F64), 2.0, {}),
        ("float16", x.astype(F16), 2.0, {}),
        ("bfloat16", x.astype(BF16), 2.0, {}),
        ("int32", xi, 2.0, {}),
        ("int64", xi.astype(I64), 2.0, {}),
        # shape
        ("shorter", x[:999].copy(), 2.0, {}),
        ("2-D", x.reshape(10, 100).copy(), 2.0, {}),
        ("3-D", x.reshape(10, 10, 10).copy(), 2.0, {}),
        ("larger", np.tile(x, 20), 2.0, {}),
        # layout
        ("strided", strided(x), 2.0, {}),
        ("read-only", readonly(x), 2.0, {}),
        ("unaligned", unaligned(x), 2.0, {}),
        ("Fortran", np.asfortranarray(x.reshape(10, 100)), 2.0, {}),
        # opset
        ("opset 7", x, 2.0, {"opset": 7}),
        ("opset 12", x, 2.0, {"opset": 12}),
        ("opset 13", x, 2.0, {"opset": 13}),
        ("opset 15", x, 2.0, {"opset": 15}),
        # Pow-1's broadcast and axis
        ("Pow-1 broadcast", cube, edge, legacy),
        ("Pow-1 axis 0", cube, edge, legacy | {"axis": 0}),
        ("Pow-1 axis 1", cube, edge, legacy | {"axis": 1}),
        ("Pow-1 axis -3", cube, edge, legacy | {"axis": -3}),
        ("Pow-1 same shape", cube, cube + 1, {"opset": 1}),
        ("Pow-1 broadcast 0", cube, cube + 1, {"opset": 1, "broadcast": 0}),
        ("Pow-1 broadcast 1", cube, cube + 1, legacy),
        ("Pow-1 scalar", cube, 2.0, legacy),
        ("Pow-1 scalar, axis 0", cube, 2.0, legacy | {"axis": 0}),
        ("Pow-1 scalar, axis 1", cube, 2.0, legacy | {"axis": 1}),
        # the exponent's value and type
        ("int 2", x, 2, {}),
        ("float 2.5", x, 2.5, {}),
        ("float 3.7", x, 3.7, {}),
        ("float -2.0", x, -2.0, {}),
        ("float 0.5", x, 0.5, {}),
        ("int 3", x, 3, {}),
        ("float32 2", x, np.float32(2), {}),
        ("float64 2", x, np.float64(2), {}),
        ("float32 2.5", x, np.float32(2.5), {}),
        ("float64 2.5", x, np.float64(2.5), {}),
        ("int64 3", x, np.int64(3), {}),
        ("array 2", x, np.array(2.0, F32), {}),
        ("array 3", x, np.array(3.0, F32), {}),
        ("array [2]", x, np.array([2.0], F32), {}),
        ("array [0.5]", x, np.array([0.5], F32), {}),
        ("array [0.5] float64", x, np.array([0.5], F64), {}),
        ("array same shape", x, same, {}),
        ("array same shape, opset 7", x, same, {"opset": 7}),
        ("array same shape, opset 12", x, same, {"opset": 12}),
        ("array same shape float64", x, pow_exponents(rng, x.shape, F64), {}),
        ("array same shape strided", x, strided(pow_exponents(rng, x.shape, F32)), {}),
        ("array same shape read-only", x, readonly(pow_exponents(rng, x.shape, F32)), {}),
        ("array same shape unaligned", x, unaligned(pow_exponents(rng, x.shape, F32)), {}),
        ("array row", x.reshape(10, 100), pow_exponents(rng, (100,), F32), {}),
        ("array column", x.reshape(10, 100), pow_exponents(rng, (10, 1), F32), {}),
    ]


def test_pow_calls_of_another_kind_make_their_own_plan(rng):
    """After a call of one kind, a call differing from it in its base's dtype, shape or
    layout, the opset, or the exponent's value or type gets its own plan and its own right
    result; the first kind's plan still serves the first kind."""
    variants = _pow_variants(rng)
    _, x0, y0, kw0 = variants[0]
    first, plan0 = run_planned(nox.pow, x0, y0, **kw0)
    _assert_pow_right(first, x0, y0, what="base", **kw0)
    seen = {id(plan0)}
    for name, x, y, kw in variants[1:]:
        result, plan = run_planned(nox.pow, x, y, what=name, **kw)
        assert id(plan) not in seen, name
        seen.add(id(plan))
        _assert_pow_right(result, x, y, what=name, **kw)
        _assert_pow_right(nox.pow(x, y, **kw), x, y, what=f"{name} (again)", **kw)
        _same_bits(nox.pow(x0, y0, **kw0), first, what=f"base after {name}")
    assert len(pow_api._PLANS) == len(variants)


def test_pow_operands_of_other_strides_and_one_shape(rng):
    """Operands of one shape and the same flags, apart in memory by other steps (strides a
    plan reads from each call): each call gets its own operands' result."""
    x = np.abs(pow_base(rng, (1000,), F32)) + 0.5
    x[np.isnan(x)] = 2.0
    y = pow_exponents(rng, (1000,), F32)
    for step in (2, 3, 4, -1, -3):
        xs, ys = (strided(v, abs(step))[:: 1 if step > 0 else -1] for v in (x, y))
        for e in (2.0, 3.7, y, ys):
            _assert_pow_right(nox.pow(xs, e), xs, e, what=f"step {step}")
        _assert_pow_right(nox.pow(x, ys), x, ys, what=f"exponents of step {step}")


def test_pow_one_element_exponents_of_one_shape(rng):
    """Exponent arrays of one element, of one dtype and shape, differ only in their value:
    each value its own plan (the exponent's class is the plan's)."""
    x = np.abs(pow_base(rng, (16,), F64)) + 0.5
    x[np.isnan(x)] = 2.0
    values = [2.0, 3.0, 0.5, -1.0, -0.5, 5.0, 3.7, 0.0, 1.0, 2.0]
    for y in values:
        e = np.array([y], F64)
        _assert_pow_right(nox.pow(x, e), x, e, what=f"[{y}]")
    assert len(pow_api._PLANS) == len(set(values))


def _matmul_variants(rng):
    a = matmul_operand(rng, (8, 8), I32)
    b = matmul_operand(rng, (8, 8), I32)
    big = matmul_operand(rng, (24, 24), I32)
    wide = matmul_operand(rng, (8, 16), I32)
    return [
        ("base", a, b, None),
        # dtype
        ("int64", a.astype(I64), b.astype(I64), None),
        ("uint32", a.astype(U32), b.astype(U32), None),
        ("uint64", a.astype(U64), b.astype(U64), None),
        ("float32", (a % 7).astype(F32), (b % 7).astype(F32), None),
        ("float16", (a % 7).astype(F16), (b % 7).astype(F16), None),
        ("bfloat16", (a % 7).astype(BF16), (b % 7).astype(BF16), None),
        # shape
        ("wider", a, matmul_operand(rng, (8, 9), I32), None),
        ("fewer rows", a[:7].copy(), b, None),  # (A's strides the same)
        ("B 8 of 16 columns", a, wide[:, :8], None),
        ("B 7 of 16 columns", a, wide[:, :7], None),  # (B's strides and flags the same)
        ("longer K", matmul_operand(rng, (8, 9), I32), matmul_operand(rng, (9, 8), I32), None),
        ("a vector", a[0].copy(), b, None),
        ("batched", np.stack([a, b]), b, None),
        ("broadcast batch", np.stack([a, b])[:, None], np.stack([b, a, b]), None),
        ("larger", matmul_operand(rng, (64, 64), I32), matmul_operand(rng, (64, 64), I32), None),
        # layout
        ("A transposed", np.asfortranarray(a), b, None),
        ("B transposed", a, np.asfortranarray(b), None),
        ("A strided", strided(a), b, None),
        ("A strided by 3", big[::3, ::3], b, None),
        ("B strided", a, strided(b), None),
        ("B strided by 3", a, big[::3, ::3], None),
        ("A negative", a[::-1, ::-1].copy()[::-1, ::-1], b, None),
        ("A read-only", readonly(a), b, None),
        ("B read-only", a, readonly(b), None),
        ("A unaligned", unaligned(a), b, None),
        ("B unaligned", a, unaligned(b), None),
        ("A broadcast rows", np.broadcast_to(a[:1], a.shape), b, None),
        # opset
        ("opset 9", a, b, 9),
        ("opset 13", a, b, 13),
    ]


def test_matmul_calls_of_another_kind_make_their_own_plan(rng):
    """After a call of one kind, a call differing from it in its operands' dtype, shape,
    strides or flags, or the opset, gets its own plan and its own right result; the first
    kind's plan still serves the first kind."""
    variants = _matmul_variants(rng)
    _, a0, b0, o0 = variants[0]
    first, plan0 = run_planned(nox.matmul, a0, b0, opset=o0)
    assert_matmul_close(first, a0, b0, what="base")
    seen = {id(plan0)}
    for name, a, b, opset in variants[1:]:
        result, plan = run_planned(nox.matmul, a, b, opset=opset, what=name)
        assert id(plan) not in seen, name
        seen.add(id(plan))
        assert_matmul_close(result, a, b, what=name)
        assert_matmul_close(nox.matmul(a, b, opset=opset), a, b, what=f"{name} (again)")
        _same_bits(nox.matmul(a0, b0, opset=o0), first, what=f"base after {name}")
    assert len(matmul_api._PLANS) == len(variants)


def _assert_other_outs(call, want, shape, dtype) -> None:
    """``call(out)`` fills an ``out`` of another layout (Fortran-ordered, strided, unaligned)
    with ``want``'s bits, and refuses, on every call, an ``out`` of another shape or dtype, a
    read-only one and one that is not an ndarray.  ``shape``: the result's, 2-D."""
    rows, cols = shape
    outs = {
        "Fortran": np.empty(shape, dtype, order="F"),
        "strided": strided(np.empty(shape, dtype)),
        "unaligned": unaligned(np.empty(shape, dtype)),
    }
    for name, out in outs.items():
        assert call(out) is out
        _same_bits(np.ascontiguousarray(out), want, what=name)
    bad = [
        (np.empty((rows, cols + 1), dtype), ValueError, "shape"),
        (np.empty(shape, F64), TypeError, "dtype"),
        (readonly(np.empty(shape, dtype)), ValueError, "read-only"),
        (np.empty(shape, dtype).tolist(), TypeError, "numpy.ndarray"),
    ]
    for out, error, match in bad:
        for _ in range(2):
            with pytest.raises(error, match=match):
                call(out)


@pytest.mark.parametrize("dtype", [F32, I32, BF16], ids=dtype_id)
@pytest.mark.parametrize("size", ["here", "pool"])
def test_matmul_calls_with_out_keep_a_plan_and_check_out_every_time(dtype, size, rng):
    """Calls with an ndarray ``out`` keep a plan of their own per kind (the operands' key), fill
    ``out`` with the bits of the call without it whatever ``out``'s layout, alignment or
    overlap with an operand, and check ``out`` on every call."""
    n = 8 if size == "here" else _side(tuning.MATMUL_HERE_MAX)
    a, b = matmul_operand(rng, (n, n), dtype), matmul_operand(rng, (n, n), dtype)
    want = nox.matmul(a, b)
    plans.clear()
    for _ in range(2):
        out = np.empty((n, n), dtype)
        assert nox.matmul(a, b, out=out) is out
        _same_bits(out, want, what="plain out")
    assert len(matmul_api._INTO) == 1
    _assert_other_outs(lambda out: nox.matmul(a, b, out=out), want, (n, n), dtype)
    for which in ("A", "B"):
        a1, b1 = a.copy(), b.copy()
        out = a1 if which == "A" else b1
        assert nox.matmul(a1, b1, out=out) is out
        _same_bits(out, want, what=f"out is {which}")


@pytest.mark.parametrize("dtype", [F32, F16, I32], ids=dtype_id)
@pytest.mark.parametrize("size", ["here", "pool"])
def test_pow_calls_with_out_keep_a_plan_and_check_out_every_time(dtype, size, rng):
    """Calls with an ndarray ``out`` keep a plan of their own per kind, fill ``out`` with the
    bits of the call without it whatever ``out``'s layout, alignment or overlap with the base,
    and check ``out`` on every call."""
    n = 24 if size == "here" else _pow_here_max()["general"] + 1
    x = pow_base(rng, (2, n), dtype)
    exponent = 3 if is_int(dtype) else 2.5
    want = nox.pow(x, exponent)
    plans.clear()
    for _ in range(2):
        out = np.empty(x.shape, dtype)
        assert nox.pow(x, exponent, out=out) is out
        _same_bits(out, want, what="plain out")
    assert len(pow_api._INTO) == 1
    _assert_other_outs(lambda out: nox.pow(x, exponent, out=out), want, x.shape, dtype)
    x1 = x.copy()
    assert nox.pow(x1, exponent, out=x1) is x1
    _same_bits(x1, want, what="out is X")


def test_matmul_operands_of_other_strides_and_one_shape(rng):
    """Operands of one shape and the same flags, apart in memory by other steps (strides the
    kernels take as arguments): each call gets its own operands' product."""
    b = matmul_operand(rng, (7, 9), I64)
    for step in (2, 3, 4, 5):
        a = strided(matmul_operand(rng, (6, 7), I64), step)
        got = nox.matmul(a, b)
        np.testing.assert_array_equal(got, matmul_exact_int(a, b), err_msg=str(step))
        bt = strided(b, step)
        np.testing.assert_array_equal(nox.matmul(a, bt), matmul_exact_int(a, bt), str(step))


# ------------------------------------------------------------------------------------------
# errors: raised on every call, no plan kept
# ------------------------------------------------------------------------------------------
_X = np.ones((2, 3), F32)
_ROW = np.ones(3, F32)

POW_ERRORS = [
    ("opset 0", (_X, 2.0), {"opset": 0}, ValueError),
    ("opset 99", (_X, 2.0), {"opset": 99}, ValueError),
    ("opset 99, array Y", (_X, _X), {"opset": 99}, ValueError),
    ("opset '13'", (_X, 2.0), {"opset": "13"}, TypeError),
    ("opset 13.0", (_X, _X), {"opset": 13.0}, TypeError),
    ("broadcast at Pow-7", (_X, _ROW), {"opset": 7, "broadcast": 1}, TypeError),
    ("axis at Pow-15", (_X, 2.0), {"axis": 0}, TypeError),
    ("Pow-1 shapes", (_X, _ROW), {"opset": 1}, ValueError),
    ("Pow-1 axis range", (_X, _ROW), {"opset": 1, "broadcast": 1, "axis": 2}, ValueError),
    ("Pow-1 axis float", (_X, _ROW), {"opset": 1, "broadcast": 1, "axis": 1.0}, ValueError),
    ("Pow-1 broadcast 2", (_X, _ROW), {"opset": 1, "broadcast": 2}, ValueError),
    ("bool X", (_X > 0, 2.0), {}, TypeError),
    ("bool Y", (_X, _X > 0), {}, TypeError),
    ("int8 X", (_X.astype(I8), 2), {}, TypeError),
    ("shapes", (_X, np.ones(4, F32)), {}, ValueError),
    ("int beyond int64", (_X.astype(I32), 2**70), {}, OverflowError),
    ("int32 at Pow-7", (_X.astype(I32), np.ones(3, I32)), {"opset": 7}, TypeError),
    ("two dtypes at Pow-7", (_X, np.ones(3, F64)), {"opset": 7}, TypeError),
    ("bfloat16 Y at Pow-13", (_X, np.ones(3, BF16)), {"opset": 13}, TypeError),
    ("numpy float64 at Pow-7", (_X.astype(F16), np.float64(2.0)), {"opset": 7}, TypeError),
]

MATMUL_ERRORS = [
    ("inner", (np.ones((4, 3), F32), np.ones((4, 4), F32)), {}, ValueError),
    ("dtypes", (np.ones((4, 3), F32), np.ones((3, 4), F64)), {}, TypeError),
    ("int8", (np.ones((3, 3), I8), np.ones((3, 3), I8)), {}, TypeError),
    ("rank 0", (np.ones((), F32), np.ones((3,), F32)), {}, ValueError),
    ("batch", (np.ones((2, 4, 3), F32), np.ones((3, 3, 4), F32)), {}, ValueError),
    ("opset 0", (np.ones((4, 3), F32), np.ones((3, 4), F32)), {"opset": 0}, ValueError),
    ("opset 99", (np.ones((4, 3), F32), np.ones((3, 4), F32)), {"opset": 99}, ValueError),
    ("opset True", (np.ones((4, 3), F32), np.ones((3, 4), F32)), {"opset": True}, TypeError),
    ("int32 at MatMul-1", (np.ones((4, 3), I32), np.ones((3, 4), I32)), {"opset": 1}, TypeError),
    ("bfloat16 at MatMul-9", (np.ones((4, 3), BF16), np.ones((3, 4), BF16)), {"opset": 9},
     TypeError),
]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "args", "kwargs", "error"),
    [(nox.pow, *case[1:]) for case in POW_ERRORS]
    + [(nox.matmul, *case[1:]) for case in MATMUL_ERRORS],
    ids=[f"pow-{c[0]}" for c in POW_ERRORS] + [f"matmul-{c[0]}" for c in MATMUL_ERRORS],
)
def test_errors_are_raised_on_every_call(op, args, kwargs, error):
    cache = _cache_of(op)
    with pytest.raises(error) as first:
        op(*args, **kwargs)
    assert len(cache) == 0  # a bad call leaves no plan behind
    for _ in range(2):
        with pytest.raises(error) as again:
            op(*args, **kwargs)
        assert str(again.value) == str(first.value)
    assert len(cache) == 0


def test_a_bad_call_after_a_good_one_of_the_same_shapes_still_raises():
    x, row = np.ones((2, 3), F32), np.ones(3, F32)
    nox.pow(x, row, opset=1, broadcast=1)
    nox.pow(x, row, opset=1, broadcast=1, axis=1)
    for _ in range(2):
        with pytest.raises(ValueError, match="Pow-1"):
            nox.pow(x, row, opset=1)  # no broadcast: shapes must be equal
        with pytest.raises(ValueError, match="axis"):
            nox.pow(x, row, opset=1, broadcast=1, axis=0)  # X's dimension 0 is 2
    same = np.ones((2, 3), F32), np.ones((2, 3), F32)
    nox.pow(*same, opset=7)
    for _ in range(2):
        with pytest.raises(TypeError, match="same dtype"):
            nox.pow(same[0], same[1].astype(F64), opset=7)
    a = np.ones((4, 3), I32)
    b = a.T.copy()
    nox.matmul(a, b, opset=9)
    nox.matmul(a, b)
    for _ in range(2):
        with pytest.raises(TypeError, match="MatMul-1"):
            nox.matmul(a, b, opset=1)
        # operands of other dtypes with the strides, shapes and flags of the good call's
        with pytest.raises(TypeError, match="same dtype"):
            nox.matmul(a.astype(U32), b)
        with pytest.raises(TypeError, match="same dtype"):
            nox.matmul(a, b.astype(U32))


@pytest.mark.parametrize(
    ("bad", "good"),
    [(13.0, 13), (np.float64(13.0), 13), (True, 1)],
    ids=["float", "numpy float", "bool"],
)
def test_an_opset_equal_in_value_to_a_valid_one_is_refused_on_every_call(bad, good):
    """An opset that is not an integer is an error, also after a call with the integer it
    equals has made its plan."""
    x = np.ones((2, 3), F32)
    for op, y in ((nox.pow, 2.0), (nox.matmul, x.T.copy())):
        with pytest.raises(TypeError, match="opset"):
            op(x, y, opset=bad)
        op(x, y, opset=good)
        with pytest.raises(TypeError, match="opset"):
            op(x, y, opset=bad)


@pytest.mark.parametrize("bad", [1.0, np.float64(1.0), True], ids=["float", "numpy float", "bool"])
def test_a_pow1_axis_equal_in_value_to_a_valid_one_is_refused_on_every_call(bad):
    x, row = np.ones((2, 3), F32), np.ones(3, F32)
    with pytest.raises(ValueError, match="axis"):
        nox.pow(x, row, opset=1, broadcast=1, axis=bad)
    nox.pow(x, row, opset=1, broadcast=1, axis=1)
    with pytest.raises(ValueError, match="axis"):
        nox.pow(x, row, opset=1, broadcast=1, axis=bad)


# ------------------------------------------------------------------------------------------
# the caches are bounded
# ------------------------------------------------------------------------------------------
def test_the_caches_stay_bounded(rng):
    x = np.linspace(0.5, 2.0, 16)
    most = 0
    for i in range(plans.MAX_PLANS * 2 + 7):
        e = 1.0 + i / 1024
        got = nox.pow(x, e)
        if i % 97 == 0:
            _assert_pow_right(got, x, e, what=str(e))
        most = max(most, len(pow_api._PLANS))
    assert most == plans.MAX_PLANS
    a = matmul_operand(rng, (3, plans.MAX_PLANS + 40), I32)
    b = matmul_operand(rng, (plans.MAX_PLANS + 40, 2), I32)
    most = 0
    for k in range(1, plans.MAX_PLANS + 40):
        got = nox.matmul(a[:, :k], b[:k])
        if k % 97 == 0:
            np.testing.assert_array_equal(got, matmul_exact_int(a[:, :k], b[:k]))
        most = max(most, len(matmul_api._PLANS))
    assert most == plans.MAX_PLANS


# ------------------------------------------------------------------------------------------
# threads share plans
# ------------------------------------------------------------------------------------------
def test_threads_share_plans(rng):
    """Threads calling the same kinds of call at once (small ones on their own thread, large
    ones on the pool), making the plans as they go, get the general path's results."""
    x_small = pow_base(rng, (16,), F32)
    x_large = pow_base(rng, (4, 50, 100), F32)
    y_small = pow_exponents(rng, (16,), F64)
    a_small, b_small = matmul_operand(rng, (8, 8), I32), matmul_operand(rng, (8, 8), I32)
    a_large, b_large = matmul_operand(rng, (64, 64), I64), matmul_operand(rng, (64, 64), I64)
    calls = [
        (nox.pow, x_small, 2.0),
        (nox.pow, x_small, 3.7),
        (nox.pow, x_small, y_small),
        (nox.pow, x_large, 2.0),
        (nox.pow, x_large, 3.7),
        (nox.matmul, a_small, b_small),
        (nox.matmul, a_large, b_large),
        (nox.matmul, a_small[0], b_small),
    ]
    expected = [_general(op, a, b) for op, a, b in calls]
    plans.clear()

    def work(seed):
        order = np.random.default_rng(seed).permutation(len(calls))
        for _ in range(10):
            for i in order:
                op, a, b = calls[i]
                _same_bits(op(a, b), expected[i], what=str(i))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for fut in [pool.submit(work, seed) for seed in range(16)]:
            fut.result(timeout=300)
    assert len(pow_api._PLANS) == 5 and len(matmul_api._PLANS) == 3


# ------------------------------------------------------------------------------------------
# small calls run on the calling thread
# ------------------------------------------------------------------------------------------
def test_small_calls_run_on_the_calling_thread(launches, rng):
    x = pow_base(rng, (16,), F32)
    a, b = matmul_operand(rng, (8, 8), I32), matmul_operand(rng, (8, 8), I32)
    for _ in range(2):  # the call that makes the plan, and one that runs it
        launches.clear()
        nox.pow(x, 2.0)
        assert launches.pool == [] and launches.here == ["pow_square"], launches.places
        launches.clear()
        nox.matmul(a, b)
        assert launches.pool == [] and len(launches.here) == 1, launches.places
        assert launches.here[0].startswith("matmul_"), launches
    x = pow_base(rng, (_pow_here_max()["other"] + 1,), F32)
    n = _side(tuning.MATMUL_HERE_MAX)  # (n**3 multiply-adds: past the crossover)
    a, b = matmul_operand(rng, (n, n), I32), matmul_operand(rng, (n, n), I32)
    for _ in range(2):
        launches.clear()
        nox.pow(x, 2.0)
        assert launches.pool == ["pow_square"] and launches.here == [], launches.places
        launches.clear()
        nox.matmul(a, b)
        assert len(launches.pool) == 1 and launches.here == [], launches.places
        assert launches.pool[0].startswith("matmul_"), launches


@pytest.mark.parametrize(
    "exponent, kernel, most",
    [(3.7, "pow_general", "general"), (2.0, "pow_square", "other"), (5, "pow_ipow", "other")],
)
def test_pow_crossover(launches, rng, exponent, kernel, most):
    """Results of at most ``tuning.POW_HERE_MAX`` elements are computed on the calling thread,
    larger ones on the pool; the general path decides the same."""
    n = tuning.POW_HERE_MAX[most]
    for size, place in ((n, "here"), (n + 1, "pool")):
        x = pow_base(rng, (size,), F32)
        for general in (False, True):
            launches.clear()
            _general(nox.pow, x, exponent) if general else nox.pow(x, exponent)
            assert launches[0] == kernel and launches.places[0] == place, (size, launches)


@pytest.mark.parametrize("dtype", [I32, U32, I64, U64], ids=dtype_id)
def test_matmul_crossover(launches, rng, dtype):
    """Own-kernel products of at most ``tuning.MATMUL_HERE_MAX`` multiply-adds
    (``MATMUL_HERE_MAX_INT64`` for 64-bit integers) run on the calling thread, larger ones on
    the pool; the general path decides the same."""
    limit = _matmul_limits()[dtype]
    for (sa, sb), place in zip(_at_and_past(limit), ("here", "pool"), strict=True):
        a, b = matmul_operand(rng, sa, dtype), matmul_operand(rng, sb, dtype)
        assert (_matmul_work(sa, sb) <= limit) == (place == "here")
        for general in (False, True):
            launches.clear()
            got = _general(nox.matmul, a, b) if general else nox.matmul(a, b)
            np.testing.assert_array_equal(got, matmul_exact_int(a, b))
            assert launches.places == [place], (sa, sb, launches, launches.places)


@contextlib.contextmanager
def _threads(count: int):
    """numba's parallel loops on ``count`` threads inside the block, the count given back."""
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        numba.set_num_threads(before)


@pytest.mark.parametrize("dtype", [F32, F64, I32, I64], ids=dtype_id)
def test_pool_products_on_one_thread_run_on_the_calling_thread(launches, rng, dtype):
    """A product past the crossover runs on the calling thread where parallel loops run on
    one thread, and on the pool where they run on more: the plan asks on every call, and both
    give the same bits."""
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba's pool has one thread here")
    n = _side(_matmul_limits()[dtype])
    a, b = matmul_operand(rng, (n, n + 3), dtype), matmul_operand(rng, (n + 3, n), dtype)
    got = {}
    for threads, place in ((1, "here"), (2, "pool"), (1, "here")):
        with _threads(threads):
            launches.clear()
            got[threads] = nox.matmul(a, b)
        assert set(launches.places) == {place}, (threads, launches.places)
    _same_bits(got[1], got[2])


def test_pool_kernels_on_one_thread_run_their_serial_twins(rng, monkeypatch):
    """Every launch made where parallel loops run on one thread runs the kernel's serial twin
    on the calling thread (a Pow past its crossover here), with the pool's bits."""
    parallel = importlib.import_module("numba_onnx_ops.runtime.parallel")
    x = pow_base(rng, (_pow_here_max()["general"] + 1,), F32)
    want = nox.pow(x, 3.7)
    launched, ran = [], []
    real_launch, real_here = parallel.launch, parallel.here

    def launch(kernel, *args):
        launched.append(kernel.py_func.__name__ + "_here")
        return real_launch(kernel, *args)

    def here(kernel, *args):
        ran.append(kernel.py_func.__name__)
        return real_here(kernel, *args)

    monkeypatch.setattr(parallel, "launch", launch)
    monkeypatch.setattr(parallel, "here", here)
    with _threads(1):
        got = nox.pow(x, 3.7)
    assert launched[0] == "pow_general_here" and ran == launched, (launched, ran)
    _same_bits(got, want)
    assert_pow_matches(got, x, 3.7)


def test_plans_keep_the_tuning_they_were_made_with(launches, rng, monkeypatch):
    """A plan reads ``tuning`` when it is made; ``plans.clear()`` makes later calls decide
    again."""
    x = pow_base(rng, (16,), F32)
    a, b = matmul_operand(rng, (8, 8), I32), matmul_operand(rng, (8, 8), I32)
    nox.pow(x, 2.0)
    nox.matmul(a, b)
    monkeypatch.setattr(tuning, "POW_HERE_MAX", {"general": 0, "other": 0})
    monkeypatch.setattr(tuning, "MATMUL_HERE_MAX", 0)
    launches.clear()
    want_pow, want_matmul = nox.pow(x, 2.0), nox.matmul(a, b)
    assert launches.places == ["here", "here"]
    plans.clear()
    launches.clear()
    _same_bits(nox.pow(x, 2.0), want_pow)
    _same_bits(nox.matmul(a, b), want_matmul)
    assert launches.places == ["pool", "pool"]


_BASE = np.arange(40 * 36, dtype=np.float32).reshape(40, 36)


@pytest.mark.parametrize(
    "view",
    [
        lambda m: m[2:10, 3:9],  # rows apart
        lambda m: m[:8, :6].copy().T,  # F-contiguous
        lambda m: m[9:1:-1, 8:2:-2],  # negative strides
        lambda m: np.broadcast_to(m[0, :6], (8, 6)),  # a zero stride
        lambda m: m[:8, :6].astype(np.float16)[:, ::2],  # a half type
        lambda m: m[:8, :8].copy(),  # C-contiguous
    ],
    ids=["rows-apart", "f-contiguous", "negative", "zero-stride", "float16", "c-contiguous"],
)
def test_a_plans_buffer_of_an_operand_is_flat_buffers_of_each_call(view):
    """``flat_buffer_of`` decides once what ``flat_buffer`` works out on every call: the same
    buffer (the same memory, length and read-only flag) for every array of the first one's
    layout, wherever its memory starts."""
    from numba_onnx_ops.core.broadcast import flat_buffer, flat_buffer_of

    first = view(_BASE)
    buffer_of = flat_buffer_of(first)
    for x in (first, view(_BASE[1:]), view(_BASE[5:].copy()), view(_BASE.copy())):
        assert x.strides == first.strides
        want, got = flat_buffer(x)[0], buffer_of(x)
        assert got.shape == want.shape and got.dtype == want.dtype
        # from x's lowest-addressed byte to its highest element, worked out here in bytes
        data = x.__array_interface__["data"][0]
        low = data + sum((n - 1) * s for n, s in zip(x.shape, x.strides) if s < 0)
        high = data + sum((n - 1) * s for n, s in zip(x.shape, x.strides) if s > 0)
        assert got.__array_interface__["data"][0] == low
        assert got.size * got.itemsize == high - low + x.itemsize
        assert got.__array_interface__["data"] == want.__array_interface__["data"]
        assert not got.flags.writeable
        np.testing.assert_array_equal(got, want)
