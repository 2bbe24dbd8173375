"""Property-based tests: shapes, dtypes, values and layouts nobody thought of, against the same
oracles as the grids; plus checks that the oracles themselves agree with numpy where numpy is
known to be exact.

Example counts stay modest (see conftest.py): every new dtype combination costs a numba compile.
"""

from __future__ import annotations

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import (
    BF16,
    C99_POW_SPECIAL,
    F16,
    F32,
    F64,
    HALFS,
    I32,
    I64,
    LAYOUTS,
    SPEC_MATMUL_TYPES,
    U64,
    Snapshot,
    as_layout,
    assert_fresh_result,
    assert_matmul_close,
    assert_pow_matches,
    assert_same_values,
    assert_within_ulp,
    c99_pow_special,
    is_int,
    matmul_exact_int,
    pow_float_exact,
    pow_int,
    pow_mpmath_rounded,
    pow_pairs,
    round_to_format,
    ulp_distance,
)

import numba_onnx_ops as noo

MATMUL_DTYPES = sorted(SPEC_MATMUL_TYPES[13], key=str)
POW15_PAIRS = pow_pairs(15)


def values(data, dtype, shape, *, small_ints=False):
    """Hypothesis-drawn values of any dtype (bfloat16 drawn as float32, then rounded)."""
    dtype = np.dtype(dtype)
    if dtype == BF16:
        return data.draw(hnp.arrays(F32, shape)).astype(BF16)
    if is_int(dtype) and small_ints:
        info = np.iinfo(dtype)
        elements = st.integers(max(info.min, -70), min(info.max, 70))
        return data.draw(hnp.arrays(dtype, shape, elements=elements))
    return data.draw(hnp.arrays(dtype, shape))


# ------------------------------------------------------------------------------------------
# MatMul
# ------------------------------------------------------------------------------------------
@given(
    shapes=hnp.mutually_broadcastable_shapes(
        signature="(m?,n),(n,p?)->(m?,p?)", max_dims=3, min_side=0, max_side=6
    ),
    dtype=st.sampled_from(MATMUL_DTYPES),
    layouts=st.tuples(st.sampled_from(LAYOUTS), st.sampled_from(LAYOUTS)),
    seed=st.integers(0, 2**32 - 1),
)
def test_matmul_shapes_dtypes_layouts(shapes, dtype, layouts, seed):
    rng = np.random.default_rng(seed)
    a_shape, b_shape = shapes.input_shapes
    a = as_layout(_random(rng, a_shape, dtype), layouts[0])
    b = as_layout(_random(rng, b_shape, dtype), layouts[1])
    snap = Snapshot(a, b)
    result = noo.matmul(a, b)
    snap.assert_unchanged()
    assert_fresh_result(result, a, b)
    assert result.shape == shapes.result_shape
    assert_matmul_close(result, a, b)


def _random(rng, shape, dtype):
    if is_int(dtype):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(np.float32 if dtype in HALFS else dtype).astype(dtype)


@st.composite
def strided_view(draw, shape, dtype, rng):
    """A view of ``shape`` into a larger random array: steps of +-1..3, maybe transposed."""
    transpose = len(shape) >= 2 and draw(st.booleans())
    if transpose:
        shape = shape[:-2] + (shape[-1], shape[-2])
    steps = [draw(st.sampled_from([1, 2, 3, -1, -2])) for _ in shape]
    offsets = [draw(st.integers(0, 2)) for _ in shape]
    base = _random(rng, [abs(s) * n + o for s, n, o in zip(steps, shape, offsets)], dtype)
    index = []
    for s, n, o, size in zip(steps, shape, offsets, base.shape):
        start = o if s > 0 else size - 1 - o
        stop = start + s * n
        index.append(slice(0, 0) if n == 0 else slice(start, stop if stop >= 0 else None, s))
    view = base[tuple(index)]
    assert view.shape == tuple(shape)
    return view.swapaxes(-1, -2) if transpose else view


@given(
    data=st.data(),
    mkn=st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9)),
    batch=st.integers(1, 3),
    dtype=st.sampled_from([F32, I64, F16]),
    seed=st.integers(0, 2**32 - 1),
)
def test_matmul_arbitrary_strides(data, mkn, batch, dtype, seed):
    rng = np.random.default_rng(seed)
    m, k, n = mkn
    a = data.draw(strided_view((batch, m, k), dtype, rng))
    b = data.draw(strided_view((k, n), dtype, rng))
    assert_matmul_close(noo.matmul(a, b), a, b)


@given(data=st.data(), dtype=st.sampled_from([I32, U64]))
def test_matmul_integer_values(data, dtype):
    shapes = data.draw(
        hnp.mutually_broadcastable_shapes(signature="(m,n),(n,p)->(m,p)", max_dims=1, max_side=5)
    )
    a = values(data, dtype, shapes.input_shapes[0])
    b = values(data, dtype, shapes.input_shapes[1])
    assert_same_values(noo.matmul(a, b), matmul_exact_int(a, b))


# ------------------------------------------------------------------------------------------
# Pow
# ------------------------------------------------------------------------------------------
@given(
    data=st.data(),
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, min_side=0, max_side=4),
    pair=st.sampled_from(POW15_PAIRS),
)
def test_pow_broadcast_dtypes_values(data, shapes, pair):
    xdtype, ydtype = pair
    x = values(data, xdtype, shapes.input_shapes[0])
    y = values(data, ydtype, shapes.input_shapes[1])
    snap = Snapshot(x, y)
    result = noo.pow(x, y)
    snap.assert_unchanged()
    assert_fresh_result(result, x, y)
    assert result.shape == shapes.result_shape and result.dtype == xdtype
    assert_pow_matches(result, x, y)


@given(
    data=st.data(),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
    xdtype=st.sampled_from([np.int32, np.int64]),
    ydtype=st.sampled_from([np.int8, np.int64, np.uint64, np.uint8]),
)
def test_pow_integer_small_values(data, shape, xdtype, ydtype):
    # small bases and exponents, where the exact power is often representable
    x = values(data, xdtype, shape, small_ints=True)
    y = values(data, ydtype, shape, small_ints=True)
    assert_same_values(noo.pow(x, y), pow_int(x, y, xdtype))


@st.composite
def pow1_broadcast(draw):
    """A legal Pow-1 broadcast: (X shape, Y shape, axis or None)."""
    xshape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
    if draw(st.booleans()):  # one element, any rank up to X's
        return xshape, (1,) * draw(st.integers(0, len(xshape))), None
    start = draw(st.integers(0, len(xshape) - 1))
    stop = draw(st.integers(start + 1, len(xshape)))
    yshape = xshape[start:stop]
    if stop == len(xshape) and draw(st.booleans()):
        return xshape, yshape, None  # suffix: axis may be left out
    return xshape, yshape, start


@given(case=pow1_broadcast(), dtype=st.sampled_from([F16, F32, F64]), seed=st.integers(0, 999))
def test_pow1_legal_broadcasts(case, dtype, seed):
    xshape, yshape, axis = case
    rng = np.random.default_rng(seed)
    x = (np.abs(rng.standard_normal(xshape)) * 3).astype(dtype)
    y = rng.uniform(-4, 4, yshape).astype(dtype)
    kwargs = {"broadcast": 1} if axis is None else {"broadcast": 1, "axis": axis}
    result = noo.pow(x, y, opset=1, **kwargs)
    if y.size == 1:
        aligned = y.reshape(())
    else:
        start = len(xshape) - len(yshape) if axis is None else axis
        aligned = y.reshape((1,) * start + yshape + (1,) * (len(xshape) - start - len(yshape)))
    assert_within_ulp(result, pow_float_exact(x, aligned), dtype)


def pow1_is_legal(xshape, yshape, axis) -> bool:
    """semantics.md's Pow-1 rule for broadcast=1, written out."""
    if axis is not None and not -len(xshape) <= axis < len(xshape):
        return False  # whatever Y is
    if int(np.prod(yshape)) == 1 and len(yshape) <= len(xshape):
        return True
    start = len(xshape) - len(yshape) if axis is None else axis % len(xshape)
    return (
        start >= 0
        and xshape[start : start + len(yshape)] == yshape
        and (start + len(yshape) <= len(xshape))
    )


@given(
    xshape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=3),
    yshape=hnp.array_shapes(min_dims=0, max_dims=5, min_side=1, max_side=3),
    axis=st.none() | st.integers(-5, 4),
)
def test_pow1_broadcast_rule(xshape, yshape, axis):
    x = np.full(xshape, 2.0, F32)
    y = np.full(yshape, 3.0, F32)
    kwargs = {"broadcast": 1} if axis is None else {"broadcast": 1, "axis": axis}
    if pow1_is_legal(xshape, yshape, axis):
        assert_same_values(noo.pow(x, y, opset=1, **kwargs), np.full(xshape, 8.0, F32))
    else:
        with pytest.raises(ValueError):
            noo.pow(x, y, opset=1, **kwargs)


@given(
    x=hnp.arrays(F32, hnp.array_shapes(max_dims=2, max_side=6)),
    y=st.floats() | st.integers(-(2**63), 2**63 - 1),
)
def test_pow_python_scalar_exponent(x, y):
    # from Pow-12 on a Python exponent becomes float64 or int64
    y_array = np.array(y, dtype=np.int64 if isinstance(y, int) else np.float64)
    assert_within_ulp(noo.pow(x, y), pow_float_exact(x, y_array), F32)


# ------------------------------------------------------------------------------------------
# the oracles themselves
# ------------------------------------------------------------------------------------------
@given(hnp.arrays(np.float64, 64, elements=st.floats(allow_subnormal=True)))
def test_oracle_rounding_matches_numpy_casts(v):
    # numpy's float64 -> float32/float16 and ml_dtypes' -> bfloat16 casts round correctly
    for dtype in (F32, F16, BF16):
        # beyond the format's range: its infinities; a signaling NaN: a quiet one (by design)
        with np.errstate(over="ignore", invalid="ignore"):
            cast = v.astype(dtype)
        assert_same_values(round_to_format(v, dtype), cast)


@given(hnp.arrays(np.float32, 32, elements=st.floats(width=32, allow_nan=False)))
def test_oracle_ulp_distance_of_neighbours(v):
    with np.errstate(over="ignore"):  # the largest float's next one up is infinity
        up = np.nextafter(v, np.float32(np.inf))
    d = ulp_distance(v, up)
    finite = np.isfinite(v) & np.isfinite(up) & (v != 0)
    assert (d[finite] == 1).all()


@given(
    data=st.data(),
    dtype=st.sampled_from([np.int32, np.int64, np.uint32, np.uint64]),
)
def test_oracle_int_matmul_matches_numpy_wrapping(data, dtype):
    # numpy's integer matmul wraps modulo 2**bits, which is what the oracle computes exactly
    shapes = data.draw(hnp.mutually_broadcastable_shapes(signature="(m,n),(n,p)->(m,p)"))
    a = data.draw(hnp.arrays(dtype, shapes.input_shapes[0]))
    b = data.draw(hnp.arrays(dtype, shapes.input_shapes[1]))
    assert_same_values(matmul_exact_int(a, b), np.matmul(a, b))


@given(
    x=hnp.arrays(np.int64, 16, elements=st.integers(-50, 50)),
    y=hnp.arrays(np.int64, 16, elements=st.integers(0, 80)),
)
def test_oracle_int_pow_matches_numpy_for_nonnegative_exponents(x, y):
    assert_same_values(pow_int(x, y, np.int64), np.power(x, y))


@given(
    x=hnp.arrays(np.float64, 16, elements=st.floats(-1e3, 1e3)),
    y=hnp.arrays(np.float64, 16, elements=st.floats(-50, 50)),
    dtype=st.sampled_from([F64, F32, F16]),
)
def test_oracle_float_pow_agrees_with_mpmath(x, y, dtype):
    # the float Pow oracle (long double powl where it is wide) contains mpmath's correctly
    # rounded value, which is what the oracle falls back to where long double is float64
    x = x.astype(dtype)
    y[::2] = np.round(y[::2])  # integer exponents, so negative bases give numbers
    expected = pow_float_exact(x, y)
    special, _ = c99_pow_special(x.astype(np.float64), y)
    mp = pow_mpmath_rounded(x[~special].astype(np.float64), y[~special], dtype)
    assert_within_ulp(mp.astype(dtype), expected[~special], dtype, max_ulp=0)


def test_oracle_c99_special_values_match_the_table():
    x, y, want = (np.array([row[i] for row in C99_POW_SPECIAL]) for i in range(3))
    special, value = c99_pow_special(x, y)
    ordinary = (x < 0) & np.isfinite(y) & (y == np.round(y)) & np.isfinite(x)
    assert (special | ordinary).all()
    assert_same_values(value[special], want[special])
