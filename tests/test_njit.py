"""MatMul and Pow called from users' ``@njit`` code: the same bits as the entry points (float
products as the documented chain of fused multiply-adds, against an exact oracle), the same
refusals as compile-time ``TypingError``s, and calls inside a user's ``prange``.

The jitted functions are module-level and cached on disk, so each specialization compiles once
(a function calling the kernels links and optimizes their code with its own: seconds each).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numba
import numpy as np
import pytest
from numba.core.errors import TypingError
from oracles import matmul_fma_chain

import numba_onnx_ops as nox
from numba_onnx_ops.runtime.numba_private import check_cache_loads, stamp_cache_index

# Every source of the package: the code of the kernels and overloads a cached function holds.
_STAMP = hashlib.sha256(
    b"".join(p.read_bytes() for p in sorted(Path(nox.__file__).parent.rglob("*.py")))
).digest()


def _cached(**options):
    """``numba.njit(cache=True)``, the cache index stamped with the package's sources: numba
    checks only the function's own file, and would serve code linked from older kernels."""

    def decorate(func):
        dispatcher = numba.njit(cache=True, **options)(func)
        if stamp_cache_index(dispatcher, _STAMP) and check_cache_loads(dispatcher):
            return dispatcher
        return numba.njit(**options)(func)

    return decorate


F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
INT_DTYPES = [np.dtype(t) for t in (np.int32, np.int64, np.uint32, np.uint64)]


@_cached()
def _matmul(a, b):
    return nox.matmul(a, b)


@_cached()
def _matmul9(a, b):
    return nox.matmul(a, b, opset=9)


@_cached()
def _pow(x, y):
    return nox.pow(x, y)


@_cached()
def _pow7(x, y):
    return nox.pow(x, y, opset=7)


@_cached()
def _pow1_axis1(x, y):
    return nox.pow(x, y, opset=1, broadcast=1, axis=1)


@_cached()
def _pow1(x, y):
    return nox.pow(x, y, opset=1)


@_cached()
def _layer(x, w, e):
    return nox.pow(nox.matmul(x, w), e)


def _same_bits(got: np.ndarray, expected: np.ndarray) -> None:
    assert type(got) is np.ndarray
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert got.tobytes() == expected.tobytes(), np.argwhere(
        got.view(np.uint8) != np.asarray(expected).view(np.uint8)
    )[:5]


# --- MatMul ---------------------------------------------------------------------------------


def _fma_chain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy.matmul's shapes, each element acc = fma(a[i, k], b[k, j], acc) over k in order
    from acc = 0, every step rounded once, exactly (``oracles.matmul_fma_chain``)."""
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    out = matmul_fma_chain(a2, b2)
    rows = (a.shape[-2],) if a.ndim > 1 else ()
    cols = (b.shape[-1],) if b.ndim > 1 else ()
    return out.reshape(out.shape[:-2] + rows + cols)


# (A's shape, B's shape): 2-D with N below, at and past a vector of columns, a broadcast batch,
# 1-D promotion on either side and both, M == 1, K == 0 and an empty result.
_SHAPES_2D = [((5, 7), (7, 3)), ((4, 9), (9, 8)), ((6, 5), (5, 37)), ((1, 16), (16, 20)),
              ((3, 0), (0, 4)), ((0, 4), (4, 6))]  # fmt: skip
_SHAPES_BATCH = [((2, 1, 3, 6), (4, 6, 9)), ((3, 4, 5), (5, 17))]
_SHAPES_ROW = [((6,), (6, 11)), ((7,), (2, 7, 3))]
_SHAPES_COLUMN = [((5, 6), (6,)), ((2, 3, 9), (9,))]


def _operands(rng, dtype, sa, sb):
    if dtype.kind == "f":
        # mixed magnitudes and signs, so rounding differs between summation orders
        def draw(shape):
            return (rng.standard_normal(shape) * 2.0 ** rng.integers(-8, 9, shape)).astype(dtype)
    else:
        info = np.iinfo(dtype)

        def draw(shape):  # wide values: the products wrap
            return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)

    return draw(sa), draw(sb)


# Each argument type a jitted function is called with compiles it again, with the kernels it
# calls linked in (seconds each).  The overloads' shape handling (1-D promotion, batches) does
# not depend on the dtype, so the whole grid of shapes runs for float32 and int64, and the
# other dtypes take their 2-D products (each dtype's kernels are the entry points' own).
@pytest.mark.parametrize(
    "dtype, shapes",
    [(F32, _SHAPES_2D), (F32, _SHAPES_BATCH), (F32, _SHAPES_ROW), (F64, _SHAPES_2D)],
    ids=["2d-float32", "batch-float32", "row-float32", "2d-float64"],
)
def test_float_products_are_the_fma_chain_over_k(rng, dtype, shapes):
    for sa, sb in shapes:
        a, b = _operands(rng, dtype, sa, sb)
        _same_bits(_matmul(a, b), _fma_chain(a, b))


def test_float_products_of_other_layouts_are_the_fma_chain(rng):
    a, b = _operands(rng, F32, (6, 9), (14, 6))
    _same_bits(_matmul(a.T[::2], b.T), _fma_chain(a.T[::2], b.T))  # strided A, Fortran B


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_float_matrix_vector_products_are_the_entry_points(rng, dtype):
    # N == 1 sums in the entry point's reassociated order (``matmul_rows_dot``): the same
    # kernel on the same operands, so the same bits
    shapes = [((5, 300), (300,))]
    if dtype == F32:
        shapes += [((2, 3, 70), (70,)), ((300,), (300,))] + _SHAPES_COLUMN
    for sa, sb in shapes:
        a, b = _operands(rng, dtype, sa, sb)
        _same_bits(_matmul(a, b), nox.matmul(a, b))


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_integer_products_are_the_entry_points(rng, dtype):
    shapes = _SHAPES_2D
    if dtype == np.int64:
        shapes = shapes + _SHAPES_BATCH + _SHAPES_ROW + _SHAPES_COLUMN + [((8,), (8,))]
    for sa, sb in shapes:
        a, b = _operands(rng, dtype, sa, sb)
        _same_bits(_matmul(a, b), nox.matmul(a, b))
    _same_bits(_matmul9(a, b), nox.matmul(a, b, opset=9))  # (the last shapes)


def test_matmul_shape_errors_are_value_errors(rng):
    a = np.ones((3, 4), np.int64)
    with pytest.raises(ValueError, match="MatMul-13: inner dimensions differ"):
        _matmul(a, np.ones((5, 2), np.int64))
    with pytest.raises(ValueError, match="MatMul-13: batch dimensions do not broadcast"):
        _matmul(np.ones((2, 3, 4), np.int64), np.ones((3, 4, 2), np.int64))


# --- Pow ------------------------------------------------------------------------------------

_FLOAT_EXPONENTS = [0.0, -0.0, 1.0, 2.0, 3.0, 0.5, -1.0, -0.5, 5.0, -7.0, 31.0, 32.0, 3.7,
                    -2.25, 1e300, float("inf"), float("nan")]  # fmt: skip
_INT_EXPONENTS = [0, 1, 2, 3, 4, -1, -3, 31, 32, 63, -(2**63)]


def _bases(rng, dtype, n=61):
    if dtype.kind == "f":
        x = rng.standard_normal(n) * 4
        x[:8] = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30]
        return x.astype(dtype)
    return rng.integers(-9, 10, n).astype(dtype)


@pytest.mark.parametrize("dtype", [F32, F64, np.dtype(np.int64)], ids=str)
def test_pow_of_python_numbers_is_the_entry_points(rng, dtype):
    x = _bases(rng, dtype)
    for e in _FLOAT_EXPONENTS:
        _same_bits(_pow(x, e), nox.pow(x, e))
    for e in _INT_EXPONENTS:
        _same_bits(_pow(x, e), nox.pow(x, e))
    if dtype == F32:  # Pow-7: a Python number takes X's dtype
        for e in (3.7, 2.0, 0.1, 1e300):
            _same_bits(_pow7(x, e), nox.pow(x, e, opset=7))


@pytest.mark.parametrize("dtype", [F32, np.dtype(np.int64)], ids=str)
def test_pow_of_array_and_numpy_scalar_exponents_is_the_entry_points(rng, dtype):
    x = _bases(rng, dtype, 60).reshape(3, 4, 5)
    for ydtype in (np.float32,) if dtype.kind == "f" else (np.uint64,):
        y = rng.integers(-4, 6, (4, 5)).astype(ydtype)
        y[0, :3] = [2, 3, 0] if ydtype == np.uint64 else [2, -1, 0]
        _same_bits(_pow(x, y), nox.pow(x, y))  # broadcast
        _same_bits(_pow(x, y[:1, :1]), nox.pow(x, y[:1, :1]))  # one element: its class
        _same_bits(_pow(x[0, 0], y[:, 1:2]), nox.pow(x[0, 0], y[:, 1:2]))  # both broadcast
    for e in (np.float32(2.5), np.float32(2.0), np.uint64(2**64 - 1)):
        _same_bits(_pow(x, e), nox.pow(x, e))
    _same_bits(_pow(x.T, 3.7), nox.pow(x.T, 3.7))  # another layout


def test_pow_of_more_than_a_chunk_is_the_entry_points(rng):
    x = (rng.random(40_000) * 3).astype(np.float32)
    x[::997] = -x[::997]  # negative bases: the fix-up pass
    for e in (3.7, 2.0, 5.0, -0.5):
        _same_bits(_pow(x, e), nox.pow(x, e))
    y = rng.standard_normal(40_000)
    _same_bits(_pow(x, y), nox.pow(x, y))


def test_pow1_attributes(rng):
    x = rng.random((2, 3, 4)).astype(np.float32)
    y = rng.random((3, 4)).astype(np.float32) * 3
    _same_bits(_pow1_axis1(x, y), nox.pow(x, y, opset=1, broadcast=1, axis=1))
    one = np.full((1,), 2.0, np.float32)
    _same_bits(_pow1_axis1(x, one), nox.pow(x, one, opset=1, broadcast=1, axis=1))
    _same_bits(_pow1(x, x), nox.pow(x, x, opset=1))
    _same_bits(_pow1(x, 3.7), nox.pow(x, 3.7, opset=1))
    with pytest.raises(ValueError, match="Pow-1: Y must equal the dimensions of X from axis 1"):
        _pow1_axis1(x, np.ones((4, 4), np.float32))
    with pytest.raises(ValueError, match="Pow-1: without broadcast=1"):
        _pow1(x, x[:, :2])


def test_pow_shape_errors_are_value_errors():
    with pytest.raises(ValueError, match="Pow-15: the shapes of X and Y do not broadcast"):
        _pow(np.ones((2, 3)), np.ones((4,)))


# --- The example, refusals, opsets ----------------------------------------------------------


def test_the_readme_layer(rng):
    x = rng.integers(-5, 5, (4, 8)).astype(np.int64)
    w = rng.integers(-5, 5, (8, 3)).astype(np.int64)
    _same_bits(_layer(x, w, 3), nox.pow(nox.matmul(x, w), 3))
    xf, wf = _operands(rng, F32, (4, 8), (8, 3))
    _same_bits(_layer(xf, wf, 3.7), nox.pow(_fma_chain(xf, wf), 3.7))


def _refusal(func, *args, words):
    with pytest.raises(TypingError) as info:
        func(*args)
    for word in words:
        assert word in str(info.value), (word, str(info.value)[:500])


def test_refused_dtypes_name_the_operator_version_and_dtype():
    b = np.ones((2, 2), np.bool_)
    _refusal(_matmul, b, b, words=["MatMul-13: A has dtype bool", "allowed: {"])
    _refusal(_pow, b, 2.0, words=["Pow-15: X has dtype bool", "allowed: {"])
    _refusal(_pow, np.ones(3), b, words=["Pow-15: Y has dtype bool"])
    i = np.ones((2, 2), np.int32)
    _refusal(_pow7, i, 2, words=["Pow-7: X has dtype int32"])
    _refusal(_pow, np.ones(3, np.float16), 2.0, words=["Pow-15: X has dtype float16", "numba"])
    _refusal(_matmul, np.ones((2, 2), np.float16), np.ones((2, 2), np.float16),
             words=["MatMul-13: A has dtype float16"])  # fmt: skip
    _refusal(_matmul, i, np.ones((2, 2)), words=["MatMul-13: A and B must have the same dtype"])


def test_opsets_are_compile_time_literals():
    i = np.ones((2, 2), np.int32)
    _refusal(numba.njit(lambda a: nox.matmul(a, a, opset=1)), i, words=["MatMul-1: A", "int32"])
    _refusal(numba.njit(lambda a: nox.matmul(a, a, opset=99)), i, words=["opset 99 is newer"])
    _refusal(numba.njit(lambda a, o: nox.pow(a, 2, opset=o)), i, 13, words=["compile-time"])
    _refusal(numba.njit(lambda a: nox.pow(a, 2, opset=13, axis=0)), i, words=["Pow-13: the"])
    _refusal(numba.njit(lambda a: nox.pow(a, 2, opset=0)), i, words=["opset must be >= 1"])
    u8 = np.ones(3, np.uint8)
    _refusal(numba.njit(lambda a, y: nox.pow(a, y, opset=7)), np.ones(3), u8, words=["Pow-7"])
    assert nox.resolve_version("Pow") == 15  # the default is the newest version
    _refusal(_pow, np.ones(3, np.uint8), 2, words=["Pow-15: X has dtype uint8"])


@_cached(parallel=True)
def _rows_in_prange(x, w, e):
    out = np.empty((x.shape[0], w.shape[1]), x.dtype)
    for i in numba.prange(x.shape[0]):
        out[i] = nox.pow(nox.matmul(x[i], w), e)
    return out


def test_calls_inside_a_users_prange(rng):
    x = rng.integers(-3, 4, (64, 8)).astype(np.int64)
    w = rng.integers(-3, 4, (8, 5)).astype(np.int64)
    _same_bits(_rows_in_prange(x, w, 3), nox.pow(nox.matmul(x, w), 3))
