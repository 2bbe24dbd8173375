"""Pow against semantics.md: every (T, T1) pair of every version, the integer rules, C99 special
values, Pow-1's legacy broadcasting, weakly typed Python scalars, layouts and out=.

Float results are checked to be within 1 ulp of the correctly rounded x ** float64(y) (computed
in long double and rounded by hand); integer results exactly, with Python integers.
"""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest
from oracles import (
    BF16,
    C99_POW_SPECIAL,
    F16,
    F32,
    F64,
    FLOATS,
    I8,
    I16,
    I32,
    I64,
    LAYOUTS,
    POW_SINCE,
    SPEC_POW_TYPES,
    U8,
    U64,
    as_layout,
    assert_pow_matches,
    assert_same_values,
    assert_within_ulp,
    available_memory_bytes,
    call_checked,
    dtype_id,
    is_int,
    pow_float_exact,
    pow_pairs,
    random_array,
    resolved_version,
    wrap_int,
)
from spies import GeneralOut

import numba_onnx_ops as noo


def pow_checked(x, y, **kwargs):
    """noo.pow with its inputs checked untouched and its result fresh."""
    return call_checked(noo.pow, x, y, **kwargs)


# ------------------------------------------------------------------------------------------
# value grids: interesting bases and exponents of each dtype
# ------------------------------------------------------------------------------------------
_FLOAT_BASES = [
    0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 10.0, -10.0, 0.1, 1.5, -1.5,
    1e-3, 1e-30, 100.0, 1e30, -1e30, 1.0009765625, 0.9990234375, np.inf, -np.inf, np.nan,
]  # fmt: skip
_FLOAT_EXPONENTS = [
    0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 0.5, -0.5, 2.5, 1 / 3, 7.25, -7.25,
    31.0, 64.0, -64.0, 1e-3, 1e10, -1e10, 1000.0, np.inf, -np.inf, np.nan,
]  # fmt: skip
_INT_BASES = [
    0, 1, -1, 2, -2, 3, -3, 7, -7, 10, 255, 65535, 2**31 - 1, -(2**31), 2**40, -(2**40),
    2**62, 2**63 - 1, -(2**63),
]  # fmt: skip
_INT_EXPONENTS = [
    0, 1, -1, 2, -2, 3, -3, 7, 15, 31, 32, 40, 63, 64, 100, 127, -128, 255, 1000, 2**31 - 1,
    -(2**31), 2**53 + 1, -(2**53 + 1), 2**62, 2**63 - 1, -(2**63), 2**63, 2**63 + 1, 2**64 - 1,
]  # fmt: skip


def _subnormal_and_max(dtype):
    info = ml_dtypes.finfo(dtype)
    return [float(info.smallest_subnormal), -float(info.smallest_subnormal), float(info.max)]


def bases(dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if is_int(dtype):
        info = np.iinfo(dtype)
        return np.array([v for v in _INT_BASES if info.min <= v <= info.max], dtype=dtype)
    with np.errstate(over="ignore"):  # ±1e30 beyond the half types' range: their infinities
        return np.array(_FLOAT_BASES + _subnormal_and_max(dtype), dtype=np.float64).astype(dtype)


def exponents(dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if is_int(dtype):
        info = np.iinfo(dtype)
        values = [v for v in _INT_EXPONENTS if info.min <= v <= info.max]
        return np.array(values + [int(info.min), int(info.max)], dtype=dtype)
    with np.errstate(over="ignore"):  # ±1e10 beyond float16's range: its infinities
        values = np.array(_FLOAT_EXPONENTS + [float(np.finfo(np.float16).max)], np.float64)
        return values.astype(dtype)


def outer_operands(xdtype, ydtype, *, materialise=False):
    x = bases(xdtype)[:, None]
    y = exponents(ydtype)[None, :]
    if materialise:  # Pow-1 without broadcast=1 needs equal shapes
        x, y = (np.array(a) for a in np.broadcast_arrays(x, y))
    return x, y


# ------------------------------------------------------------------------------------------
# versions and type tables
# ------------------------------------------------------------------------------------------
def test_type_table_matches_spec():
    assert set(noo.POW_TYPES) == set(POW_SINCE)
    for version, (t, t1) in SPEC_POW_TYPES.items():
        got_t, got_t1 = noo.POW_TYPES[version]
        assert {np.dtype(d) for d in got_t} == set(t), version
        assert {np.dtype(d) for d in got_t1} == set(t1), version


@pytest.mark.parametrize("opset", [*range(1, 26), None])
def test_resolve_version(opset):
    expected = 15 if opset is None else resolved_version(POW_SINCE, opset)
    assert noo.resolve_version("Pow", opset) == expected


# ------------------------------------------------------------------------------------------
# every (T, T1) pair of every version against the oracle
# ------------------------------------------------------------------------------------------
PAIRS = [(v, t, t1) for v in POW_SINCE for t, t1 in pow_pairs(v)]


@pytest.mark.parametrize(
    ("version", "xdtype", "ydtype"),
    PAIRS,
    ids=[f"Pow{v}-{dtype_id(t)}-{dtype_id(t1)}" for v, t, t1 in PAIRS],
)
def test_every_type_pair(version, xdtype, ydtype):
    x, y = outer_operands(xdtype, ydtype, materialise=version == 1)
    result = pow_checked(x, y, opset=version)
    assert result.dtype == xdtype
    assert_pow_matches(result, x, y, what=f"Pow-{version} {xdtype}^{ydtype}")


#: (X dtype, Y dtype, the first version that allows the pair)
_FIRST_ALLOWED = [(F32, F32, 1), (F32, F64, 12), (I32, I32, 12), (I64, F32, 12), (BF16, F32, 13),
                  (F32, BF16, 15)]  # fmt: skip


@pytest.mark.parametrize("opset", [1, 6, 7, 11, 12, 13, 14, 15, 21, None])
def test_opset_selects_version(opset):
    """What the call does tells the version that ran: Pow-1's legacy broadcasting, and the
    (X, Y) dtype pairs each version first allows."""
    version = 15 if opset is None else resolved_version(POW_SINCE, opset)
    x = np.array([[1.5, 2.0, 0.5], [3.0, 0.25, 4.0]], F32)
    row = np.array([2.0, -1.0, 0.5], F32)
    if version == 1:  # broadcasting only with broadcast=1
        assert_pow_matches(pow_checked(x, row, opset=opset, broadcast=1), x, row)
        with pytest.raises(ValueError, match="Pow-1"):
            noo.pow(x, row, opset=opset)
    else:  # numpy-style broadcasting; the attributes do not exist
        assert_pow_matches(pow_checked(x, row, opset=opset), x, row)
        with pytest.raises(TypeError, match=f"Pow-{version}"):
            noo.pow(x, row, opset=opset, broadcast=1)
    for xdtype, ydtype, since in _FIRST_ALLOWED:
        xs, ys = (x * 2).astype(xdtype), np.broadcast_to(row, x.shape).astype(ydtype)
        if version >= since:
            assert_pow_matches(pow_checked(xs, ys, opset=opset), xs, ys)
        else:
            with pytest.raises(TypeError, match=f"Pow-{version}"):
                noo.pow(xs, ys, opset=opset)


# ------------------------------------------------------------------------------------------
# float accuracy on random data, exhaustive half-precision bases
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
def test_random_float_accuracy(dtype, rng):
    n = 4000
    x = np.exp(rng.uniform(-7, 7, n)) * rng.choice([-1.0, 1.0], n)
    y = rng.uniform(-12, 12, n)
    y[::3] = np.round(y[::3])  # integer exponents, so negative bases give numbers
    near_one = 1 + rng.uniform(-1e-3, 1e-3, n // 4)  # large exponents amplify errors
    x = np.concatenate([x, near_one]).astype(dtype)
    y = np.concatenate([y, rng.uniform(-3000, 3000, n // 4)]).astype(dtype)
    assert_pow_matches(pow_checked(x, y), x, y)


@pytest.mark.parametrize("inner", [1, 1023, 1024, 1025, 3000, 16384 + 1024 + 7])
@pytest.mark.parametrize("yshape", ["scalar", "same", "row"])
def test_float32_general_blocks(inner, yshape, rng):
    # float32 general powers run per chunk of 16384 in blocks of 1024 and a shorter tail;
    # zero, negative and subnormal bases and infinities sit anywhere in them
    x = (np.exp(rng.uniform(-5, 5, (3, inner))) * rng.choice([-1.0, 1.0], (3, inner))).astype(F32)
    special = rng.integers(0, x.size, min(x.size, 12))
    x.flat[special] = rng.choice([0.0, -0.0, np.inf, -np.inf, 1e-42, -3.0, np.nan], special.size)
    y = {
        "scalar": np.array(3.7, F32),
        "same": rng.uniform(-4, 4, x.shape).round(1).astype(F32),
        "row": rng.uniform(-4, 4, inner).round(1).astype(F32),
    }[yshape]
    assert_pow_matches(pow_checked(x, y), x, y)


@pytest.mark.parametrize("inner", [1, 1023, 1025, 3000, 16384 + 1024 + 7])
@pytest.mark.parametrize("yshape", ["scalar", "same", "row"])
def test_float64_blocks_with_special_elements(inner, yshape, rng):
    # float64 general powers take a fast path per block of 1024 when its bases are normal and
    # its exponents finite, and compute the block again otherwise: one special base or
    # exponent anywhere must give C99's value there and leave every other element as it is
    # without it, bit for bit
    x = np.exp(rng.uniform(-5, 5, (3, inner))) * rng.choice([-1.0, 1.0], (3, inner))
    y = {
        "scalar": np.array(3.7),
        "same": rng.uniform(-4, 4, x.shape).round(1),
        "row": rng.uniform(-4, 4, inner).round(1),
    }[yshape]
    plain = pow_checked(x, y)
    xs, ys = x.copy(), y.copy()
    special = rng.integers(0, x.size, min(x.size, 6))
    xs.flat[special] = rng.choice([0.0, -0.0, np.inf, -np.inf, 5e-310, -3.0, np.nan], special.size)
    if ys.ndim:
        at = rng.integers(0, ys.size, min(ys.size, 3))
        ys.flat[at] = rng.choice([np.inf, -np.inf, np.nan], at.size)
    result = pow_checked(xs, ys)
    assert_pow_matches(result, xs, ys)
    yb, ysb = np.broadcast_to(y, x.shape), np.broadcast_to(ys, x.shape)
    touched = (xs != x) | np.isnan(xs) | (ysb != yb) | np.isnan(ysb)
    assert np.array_equal(result[~touched].view(np.uint64), plain[~touched].view(np.uint64))


_POSITIVE_FINITE_BITS = {  # (unsigned view, smallest positive bits, +inf bits)
    F16: (np.uint16, 1, 0x7C00),
    BF16: (np.uint16, 1, 0x7F80),
    F32: (np.uint32, 1, 0x7F800000),
    F64: (np.uint64, 1, 0x7FF0000000000000),
}


@pytest.mark.parametrize("ydtype", [None, F64], ids=["same", "float64"])
@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
def test_results_across_the_whole_range(dtype, ydtype, rng):
    # bases from random bit patterns (subnormals included), exponents chosen so that x ** y
    # lands anywhere from below the smallest subnormal to beyond the largest finite value,
    # and negative bases with integer exponents of both parities
    ydtype = dtype if ydtype is None else ydtype
    view, lo, hi = _POSITIVE_FINITE_BITS[dtype]
    n = 3000
    x = rng.integers(lo, hi, n, dtype=view).view(dtype)
    x = x[x.astype(np.float64) != 1.0]
    info = ml_dtypes.finfo(dtype)
    lowest, highest = np.log2(float(info.smallest_subnormal)) - 2, np.log2(float(info.max)) + 2
    target = rng.uniform(lowest, highest, x.size)  # log2 of the result
    log2x = np.log2(x.astype(np.float64))
    y = (target / log2x).astype(ydtype)
    x_neg = -x[: x.size // 2]
    y_int = np.round(target[: x.size // 2] / log2x[: x.size // 2]).astype(ydtype)
    xs = np.concatenate([x, x_neg])
    ys = np.concatenate([y, y_int])
    assert_pow_matches(pow_checked(xs, ys, opset=15), xs, ys)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=dtype_id)
def test_every_half_base(dtype):
    x = np.arange(2**16, dtype=np.uint16).view(dtype)
    y = np.array([2.0, 0.5, -1.0, 3.0, 1 / 3, -2.5, 7.7], dtype=dtype)[:, None]
    assert_pow_matches(pow_checked(x, y), x, y)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=dtype_id)
def test_half_base_float64_exponent_is_not_narrowed(dtype):
    # the exponent's float64 value counts: 0.1 is not float32(0.1) or float16(0.1)
    x = np.arange(2**16, dtype=np.uint16).view(dtype)[::7]
    y = np.array([0.1, -0.1, 1 / 3, 2.3], dtype=np.float64)[:, None]
    assert_pow_matches(pow_checked(x, y), x, y)


# ------------------------------------------------------------------------------------------
# broadcasting (Pow-7 and later)
# ------------------------------------------------------------------------------------------
BCAST_SHAPES = {
    "0d^0d": ((), ()),
    "1d^0d": ((5,), ()),
    "0d^1d": ((), (5,)),
    "4d^1d": ((2, 3, 4, 5), (5,)),
    "4d^2d": ((2, 3, 4, 5), (4, 5)),
    "both": ((2, 1, 4, 1), (3, 1, 5)),
    "size1^n": ((1,), (7,)),
    "rank6": ((2, 1, 3, 1, 2, 1), (1, 2, 1, 3, 1, 2)),
    "odd_sizes": ((129, 1), (1, 257)),
    "zero": ((0,), (1,)),
    "zero_bcast": ((3, 0, 2), (1, 2)),
    "zero_both": ((0, 3), (0, 1)),
}
BCAST_PAIRS = [(F32, F32), (F64, I64), (I64, I64), (I32, F64), (BF16, F32)]


@pytest.mark.parametrize(("xdtype", "ydtype"), BCAST_PAIRS, ids=lambda d: dtype_id(d))
@pytest.mark.parametrize("shapes", list(BCAST_SHAPES.values()), ids=list(BCAST_SHAPES))
def test_broadcast_grid(shapes, xdtype, ydtype, rng):
    x = random_array(rng, shapes[0], xdtype, scale=3.0)
    if is_int(xdtype):
        x = (x % 7 - 3).astype(xdtype)  # keep powers meaningful, not all wrapped to 0
    y = random_array(rng, shapes[1], ydtype, scale=4.0)
    if is_int(ydtype):
        y = (y % 40 - 5).astype(ydtype)
    result = pow_checked(x, y)
    assert result.shape == np.broadcast_shapes(x.shape, y.shape)
    assert_pow_matches(result, x, y)


# ------------------------------------------------------------------------------------------
# layouts
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("xdtype", "ydtype"), [(F32, F32), (I32, I64), (F16, F64)], ids=str)
@pytest.mark.parametrize(("layout_x", "layout_y"), list(itertools.product(LAYOUTS, LAYOUTS)))
def test_layout_grid(layout_x, layout_y, xdtype, ydtype, rng):
    x = random_array(rng, (3, 4, 5), F64) * 2
    y = random_array(rng, (3, 4, 5), F64) * 3
    x = as_layout(np.round(x).astype(xdtype) if is_int(xdtype) else x.astype(xdtype), layout_x)
    y = as_layout(np.round(y).astype(ydtype) if is_int(ydtype) else y.astype(ydtype), layout_y)
    assert_pow_matches(pow_checked(x, y), x, y, what=f"{layout_x} ^ {layout_y}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_pow1(layout, rng):
    x = as_layout(np.abs(random_array(rng, (4, 6), F32)), layout)
    y = as_layout(random_array(rng, (4, 6), F32), layout)
    assert_pow_matches(pow_checked(x, y, opset=1), x, y)


# ------------------------------------------------------------------------------------------
# results too large for the caches: written with non-temporal stores
# ------------------------------------------------------------------------------------------
@pytest.fixture
def streaming(monkeypatch):
    """``streaming(True)``: every result counts as larger than the caches, so the classes
    bound by memory write their whole cache lines with non-temporal stores and the partial ones
    plainly; ``streaming(False)``: none does.  Results of every size run on the pool's kernels,
    the ones that stream (the calling thread's take small results only, and never stream)."""
    from numba_onnx_ops import tuning
    from numba_onnx_ops.core import plans
    from numba_onnx_ops.runtime import cpu

    monkeypatch.setattr(tuning, "POW_HERE_MAX", {"general": 0, "other": 0})
    plans.clear()

    def switch(on: bool) -> None:
        monkeypatch.setattr(cpu, "last_level_cache_bytes", lambda: 0 if on else 1 << 62)

    return switch


def _assert_power(actual: np.ndarray, x: np.ndarray, e) -> None:
    """``actual`` is x ** e: exact for integers (the oracle), and for float squares the exact
    square (twice the significand bits fit in float64 for the narrow types, and a float64
    product is rounded once) rounded once; roots and reciprocals within the oracle's bound."""
    if e == 2 and not is_int(x.dtype):
        wide = x.astype(F64)
        assert_same_values(actual, (wide * wide).astype(x.dtype))
    else:
        assert_pow_matches(actual, x, np.array(e, x.dtype))


def _with_specials(x: np.ndarray) -> np.ndarray:
    """Float bases with zeros of both signs, infinities, NaN and subnormals among them."""
    if is_int(x.dtype):
        return x
    tiny = float(ml_dtypes.finfo(x.dtype).smallest_subnormal)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny], x.dtype)
    x = x.copy()
    x[::5] = np.resize(specials, x[::5].shape)
    return x


_STREAM_LENGTHS = [1, 7, 15, 16, 17, 33, 63, 64, 65, 1000, 16384 + 37]


@pytest.mark.parametrize(
    ("dtype", "e"),
    [
        (F16, 2), (BF16, 2), (F16, 0.5), (F32, 2), (F64, 2), (F32, 0.5), (F64, 0.5),
        (F32, -1), (F64, -1), (I32, 2), (I32, 3), (I64, 2), (I64, 3),
    ],
    ids=lambda v: dtype_id(v) if isinstance(v, np.dtype) else str(v),
)  # fmt: skip
def test_streamed_results_at_every_offset_of_a_line(streaming, rng, dtype, e):
    # (float cubes are never streamed: two roundings are not one)
    y = np.array(e, dtype)
    for n in _STREAM_LENGTHS:
        x = _with_specials(random_array(rng, (n,), dtype))
        streaming(False)
        plain = pow_checked(x, y)
        streaming(True)
        got = pow_checked(x, y)
        _assert_power(got, x, e)
        assert_same_values(got, plain)  # NaN where NaN, zeros of the same sign
        buf = np.zeros(n + 64, dtype)
        for shift in (1, 3, 8, 13):  # the result starting at other offsets from a line
            out = buf[shift : shift + n]
            assert noo.pow(x, y, out=out) is out
            assert_same_values(out, plain)
    # rows of odd length: every chunk starts somewhere else in a line
    x = _with_specials(random_array(rng, (5, 333), dtype))
    for xs in (x, x[:, ::2]):
        streaming(False)
        plain = pow_checked(xs, y)
        streaming(True)
        assert_same_values(pow_checked(xs, y), plain)


@pytest.mark.parametrize("dtype", [F32, I32, I64], ids=dtype_id)
def test_streamed_result_at_an_address_off_its_element_size(streaming, rng, dtype):
    streaming(True)
    n = 1000
    x = random_array(rng, (n,), dtype)
    raw = np.zeros(n * dtype.itemsize + 8, np.uint8)
    out = raw[1 : 1 + n * dtype.itemsize].view(dtype)  # not aligned to its own size
    assert not out.flags.aligned
    noo.pow(x, np.array(2, dtype), out=out)
    _assert_power(out, x, 2)


# ------------------------------------------------------------------------------------------
# integer X with integer Y
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("xdtype", [I32, I64], ids=dtype_id)
def test_integer_wraparound(xdtype):
    bits = 8 * xdtype.itemsize
    cases = [(2, bits - 1), (2, bits), (3, 40), (3, 41), (-2, bits - 1), (-3, 77), (7, 2**20 + 1)]
    x = np.array([c[0] for c in cases], dtype=xdtype)
    y = np.array([c[1] for c in cases], dtype=np.int64)
    expected = wrap_int(np.array([pow(a, b) for a, b in cases], dtype=object), xdtype)
    assert_same_values(pow_checked(x, y), expected)


@pytest.mark.parametrize("ydtype", [I8, I16, I32, I64], ids=dtype_id)
@pytest.mark.parametrize("xdtype", [I32, I64], ids=dtype_id)
def test_negative_integer_exponents(xdtype, ydtype):
    lowest = np.iinfo(xdtype).min
    cases = [
        (1, -1, 1), (1, -7, 1), (1, -128, 1),  # 1 ** y = 1
        (-1, -1, -1), (-1, -3, -1), (-1, -127, -1),  # odd y: -1
        (-1, -2, 1), (-1, -128, 1),  # even y: 1
        (2, -1, 0), (-2, -1, 0), (3, -2, 0), (-100, -3, 0), (lowest, -1, 0),  # |x| >= 2: 0
        (0, -1, lowest), (0, -2, lowest), (0, -128, lowest),  # 0 ** negative: dtype minimum
    ]  # fmt: skip
    x = np.array([c[0] for c in cases], dtype=xdtype)
    y = np.array([c[1] for c in cases], dtype=ydtype)
    expected = np.array([c[2] for c in cases], dtype=xdtype)
    assert_same_values(pow_checked(x, y), expected)


@pytest.mark.parametrize("xdtype", [I32, I64], ids=dtype_id)
def test_zero_to_zero_is_one(xdtype):
    y = np.zeros(4, dtype=np.int64)
    x = np.array([0, 5, -5, np.iinfo(xdtype).min], dtype=xdtype)
    assert_same_values(pow_checked(x, y), np.ones(4, dtype=xdtype))


@pytest.mark.parametrize("xdtype", [I32, I64], ids=dtype_id)
def test_uint64_exponents_beyond_int64(xdtype):
    bits = 8 * xdtype.itemsize
    ys = [2**63, 2**63 + 1, 2**64 - 1, 2**64 - 2]
    xs = [0, 1, -1, 2, -2, 3, -3, 5, 2**31 - 1, -(2**31)]
    x = np.array(xs, dtype=xdtype)[:, None]
    y = np.array(ys, dtype=U64)[None, :]
    exact = np.array([[pow(a, b, 2**bits) for b in ys] for a in xs], dtype=object)
    assert_same_values(pow_checked(x, y), wrap_int(exact, xdtype))


@pytest.mark.parametrize("ydtype", [U8, U64], ids=dtype_id)
def test_unsigned_exponents_are_not_negative(ydtype):
    # 255 as uint8 is +255, not -1: 2 ** 255 wraps to 0, (-1) ** 255 = -1, 3 ** 255 wraps
    x = np.array([2, -1, 3, 0], dtype=I64)
    y = np.array(np.iinfo(ydtype).max, dtype=ydtype)
    ymax = int(np.iinfo(ydtype).max)
    expected = wrap_int(np.array([pow(v, ymax, 2**64) for v in (2, -1, 3, 0)], object), I64)
    assert_same_values(pow_checked(x, y), expected)


# ------------------------------------------------------------------------------------------
# integer X with float Y: float64 pow, truncated toward zero, else the dtype minimum
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ydtype", [F16, F32, F64, BF16], ids=dtype_id)
@pytest.mark.parametrize("xdtype", [I32, I64], ids=dtype_id)
def test_integer_base_float_exponent(xdtype, ydtype):
    lowest = np.iinfo(xdtype).min
    big = 62.0 if xdtype == I64 else 30.0  # 2 ** big is representable
    cases = [
        (2, 0.5, 1), (7, 0.5, 2), (9, 0.5, 3), (-8, 1.0, -8), (-2, 3.0, -8),  # truncation
        (10, -1.0, 0), (-3, -1.0, 0), (3, -0.5, 0), (-2, -1.0, 0),  # toward zero, no -0
        (5, 0.0, 1), (0, 0.0, 1), (1, np.nan, 1), (1, np.inf, 1), (-1, np.inf, 1),  # C99
        (2, big, 2 ** int(big)), (-2, big + 1, -(2 ** int(big + 1))),  # largest magnitudes
        (-2, 0.5, lowest), (-7, 2.5, lowest),  # NaN
        (0, -1.0, lowest), (0, -0.5, lowest), (2, np.inf, lowest), (3, 1e4, lowest),  # inf
        (2, big + 1, lowest), (-2, big + 2, lowest),  # out of range
        (2, np.nan, lowest), (0, np.nan, lowest),  # NaN exponent
        (0, 0.5, 0), (2, -np.inf, 0), (-2, -np.inf, 0),  # zero results
    ]  # fmt: skip
    x = np.array([c[0] for c in cases], dtype=xdtype)
    y = np.array([c[1] for c in cases], dtype=np.float64).astype(ydtype)
    expected = np.array([c[2] for c in cases], dtype=xdtype)
    assert_same_values(pow_checked(x, y), expected)


def test_integer_base_float_exponent_truncates_before_range_check():
    # 2 ** 30.99999999999 = 2147483647.985...: truncated it is INT32_MAX, which is in range
    # (onnxruntime's and numpy's double -> int32 conversion on x86-64 give exactly this);
    # (-2) ** 31.0 = -2**31 is the minimum itself, in range
    x = np.array([2, -2], dtype=I32)
    y = np.array([30.99999999999, 31.0], dtype=F64)
    assert_same_values(pow_checked(x, y), np.array([2**31 - 1, -(2**31)], dtype=I32))


def test_int64_base_is_converted_to_float64_first():
    # r = x ** y computed in float64: float64(2**63 - 1) == 2**63, outside int64 -> minimum
    x = np.array([2**63 - 1, -(2**63), 2**53 + 1], dtype=I64)
    y = np.array([1.0, 1.0, 1.0])
    lowest = np.iinfo(I64).min
    assert_same_values(pow_checked(x, y), np.array([lowest, lowest, 2**53], dtype=I64))


# ------------------------------------------------------------------------------------------
# float X with integer Y: y is the exponent's value converted to float64
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("xdtype", FLOATS, ids=dtype_id)
def test_float_base_huge_integer_exponents(xdtype):
    # int64 2**53 + 1 becomes the even float64 2**53, so (-1) ** it is +1
    x = np.array([-1.0, -1.0, 1.5, -1.5, 0.5, -0.5, 1.0, 0.0, -0.0], dtype=xdtype)[:, None]
    y_i64 = np.array([2**53 + 1, -(2**53 + 1), 2**63 - 1, -(2**63), 3, -3], dtype=I64)
    expected = pow_float_exact(x, y_i64)
    assert float(expected[0, 0]) == 1.0 and float(expected[1, 1]) == 1.0
    assert_within_ulp(pow_checked(x, y_i64), expected, xdtype)
    y_u64 = np.array([2**63, 2**64 - 1, 2**63 + 1], dtype=U64)
    assert_within_ulp(pow_checked(x, y_u64), pow_float_exact(x, y_u64), xdtype)


@pytest.mark.parametrize("y", [0.75, 3.7, 33.0, 34.0, 2.0**23 + 1, 1e10, -3.7, -33.0], ids=str)
@pytest.mark.parametrize("xdtype", FLOATS, ids=dtype_id)
def test_bases_of_every_sign_under_a_scalar_exponent(xdtype, y):
    # A scalar exponent outside the special classes (integers from 32 on included), over bases
    # of both signs, zeros, subnormals, infinities and NaN, in tasks of several chunks.
    bases = [0.0, -0.0, 1.5, -1.5, 0.75, -0.75, 1.0, -1.0, 3.0e38, -3.0e38, 1e-40, -1e-40]
    bases += [math.inf, -math.inf, math.nan]
    with np.errstate(over="ignore"):  # ±3e38 (and 1e10) beyond float16's range: infinities
        x = np.tile(np.array(bases, np.float64).astype(xdtype), 2200)
        exponent = np.array(y, dtype=xdtype)
    assert_within_ulp(pow_checked(x, exponent), pow_float_exact(x, exponent), xdtype)


# ------------------------------------------------------------------------------------------
# C99 special values (Annex F, pow)
# ------------------------------------------------------------------------------------------
C99_PAIRS = [
    (7, F16, F16),
    (7, F32, F32),
    (7, F64, F64),
    (1, F32, F32),
    (15, BF16, BF16),
    (15, F32, F64),
    (15, F64, F32),
    (15, F16, BF16),
    (15, BF16, F64),
]


@pytest.mark.parametrize(("version", "xdtype", "ydtype"), C99_PAIRS, ids=str)
def test_c99_special_values(version, xdtype, ydtype):
    x = np.array([c[0] for c in C99_POW_SPECIAL], dtype=np.float64).astype(xdtype)
    y = np.array([c[1] for c in C99_POW_SPECIAL], dtype=np.float64).astype(ydtype)
    expected = np.array([c[2] for c in C99_POW_SPECIAL], dtype=np.float64).astype(xdtype)
    assert_same_values(pow_checked(x, y, opset=version), expected, what="C99 pow")


@pytest.mark.parametrize("ydtype", [I8, I32, I64, U8], ids=dtype_id)
@pytest.mark.parametrize("xdtype", [F16, BF16, F32, F64], ids=dtype_id)
def test_c99_special_values_integer_exponents(xdtype, ydtype):
    # the C99 rows whose exponent is an integer, with an integer exponent dtype
    rows = [c for c in C99_POW_SPECIAL if np.isfinite(c[1]) and float(c[1]).is_integer()]
    if ydtype.kind == "u":
        rows = [c for c in rows if c[1] >= 0]
    x = np.array([c[0] for c in rows], dtype=np.float64).astype(xdtype)
    y = np.array([int(c[1]) for c in rows], dtype=ydtype)
    expected = np.array([c[2] for c in rows], dtype=np.float64).astype(xdtype)
    assert_same_values(pow_checked(x, y, opset=15), expected, what="C99 pow")


# ------------------------------------------------------------------------------------------
# Pow-1 broadcasting: only with broadcast=1, Y a scalar or a contiguous run of X's dimensions
# ------------------------------------------------------------------------------------------
X4 = (2, 3, 4, 5)


def pow1_expected(x, y, axis):
    """Pow-1's broadcast: Y (a scalar, or X's dims axis..axis+ndim(Y)) aligned, then numpy."""
    if y.size == 1:
        return pow_float_exact(x, y.reshape(()))
    start = x.ndim - y.ndim if axis is None else axis % x.ndim  # semantics.md: -1 is the last
    aligned = y.reshape((1,) * start + y.shape + (1,) * (x.ndim - start - y.ndim))
    return pow_float_exact(x, aligned)


POW1_LEGAL = [
    ((), None),
    ((1, 1), None),
    ((1,), None),
    ((1, 1, 1, 1), None),
    ((5,), None),
    ((4, 5), None),
    ((3, 4), 1),
    ((2,), 0),
    ((2, 3), 0),
    ((4, 5), 2),
    ((5,), 3),
    ((3, 4, 5), 1),
    ((2, 3, 4, 5), None),
    ((2, 3, 4, 5), 0),
    ((4, 5), -2),  # a negative axis counts from the end
    ((3, 4), -3),
    ((5,), -1),
    ((2,), -4),
    ((2, 3, 4, 5), -4),
    ((1,), -4),  # one element: a scalar, axis in range
    ((), 3),
]


@pytest.mark.parametrize(("yshape", "axis"), POW1_LEGAL, ids=str)
def test_pow1_legal_broadcasts(yshape, axis, rng):
    x = np.abs(random_array(rng, X4, F32)) + 0.5
    y = random_array(rng, yshape, F32)
    kwargs = {"broadcast": 1} if axis is None else {"broadcast": 1, "axis": axis}
    result = pow_checked(x, y, opset=1, **kwargs)
    assert result.shape == X4
    assert_within_ulp(result, pow1_expected(x, y, axis), F32)


POW1_ILLEGAL = [
    ((3, 4), None, 1),  # not a trailing run, no axis
    ((1, 5), None, 1),  # no size-1 expansion
    ((4, 1), None, 1),
    ((4, 5), 1, 1),  # X's dims 1..2 are (3, 4)
    ((5,), 0, 1),
    ((3,), None, 1),
    ((6,), None, 1),
    ((2, 3, 4, 5, 1), None, 1),  # rank above X's
    ((1, 1, 1, 1, 1), None, 1),  # one element, but rank above X's
    ((4, 5), 3, 1),  # run past X's last dimension
    ((5,), None, 0),  # broadcast=0: same shape required
    ((), None, 0),
    ((1, 1, 1, 1), None, 0),
    ((2, 3, 4, 1), None, 0),
    ((4, 5), -1, 1),  # from the last dimension, a run of two leaves X
    ((3, 4), -2, 1),  # X's dims -2.. are (4, 5)
    ((5,), 4, 1),  # axis outside [-4, 3]
    ((5,), -5, 1),
    ((), 4, 1),  # out of range even for a one-element Y
    ((1, 1), -5, 1),
    ((2, 3, 4, 5), 7, 0),
]


@pytest.mark.parametrize(("yshape", "axis", "broadcast"), POW1_ILLEGAL, ids=str)
def test_pow1_illegal_broadcasts(yshape, axis, broadcast):
    x = np.ones(X4, F32)
    y = np.ones(yshape, F32)
    kwargs = {"broadcast": broadcast}
    if axis is not None:
        kwargs["axis"] = axis
    with pytest.raises(ValueError):
        noo.pow(x, y, opset=1, **kwargs)


def test_pow1_default_is_no_broadcast():
    x = np.full(X4, 2.0, F32)
    with pytest.raises(ValueError):
        noo.pow(x, np.ones((5,), F32), opset=1)
    y = np.full(X4, 3.0, F32)
    assert_same_values(pow_checked(x, y, opset=1), np.full(X4, 8.0, F32))
    assert_same_values(pow_checked(x, y, opset=1, broadcast=0), np.full(X4, 8.0, F32))


@pytest.mark.parametrize("axis", [None, -4, 2, 3.0, True])
@pytest.mark.parametrize("broadcast", [None, 0, 1])
def test_pow1_python_scalar_applies_everywhere(broadcast, axis):
    # a plain Python scalar Y is a constant for every element whatever broadcast says; an
    # axis must still be an integer in [-rank(X), rank(X) - 1]
    x = np.full(X4, 3.0, F32)
    if axis is not None and (isinstance(axis, (bool, float)) or not -4 <= axis < 4):
        with pytest.raises(ValueError, match="axis"):
            noo.pow(x, 2.0, opset=1, broadcast=broadcast, axis=axis)
        return
    result = pow_checked(x, 2.0, opset=1, broadcast=broadcast, axis=axis)
    assert_same_values(result, np.full(X4, 9.0, F32))


@pytest.mark.parametrize("opset", [1, 6])
def test_pow1_range_of_opsets(opset):
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], F64)
    y = np.array([2.0, 0.5, -1.0], F64)
    assert_within_ulp(pow_checked(x, y, opset=opset, broadcast=1), pow_float_exact(x, y), F64)


# ------------------------------------------------------------------------------------------
# weakly typed Python scalars
# ------------------------------------------------------------------------------------------
HALF_X = np.array([0.5, 1.5, -2.0, 3.0, 65504.0, 1e-4], dtype=np.float64)


@pytest.mark.parametrize("opset", [1, 7, 12, 13, 15])
@pytest.mark.parametrize("exponent", [2.0, 2, 0.5, -1])
def test_python_exponent_with_float16_base(opset, exponent):
    x = HALF_X.astype(F16)
    kwargs = {"broadcast": 1} if opset == 1 else {}
    result = pow_checked(x, exponent, opset=opset, **kwargs)
    assert result.dtype == F16
    assert_within_ulp(result, pow_float_exact(x, np.array(float(exponent))), F16)


@pytest.mark.parametrize("opset", [1, 7, 15])
def test_python_exponent_with_zero_dim_base(opset):
    # shapes match exactly (both 0-d), so no broadcast attribute is needed even at Pow-1
    x = np.array(3.0, dtype=F16)
    result = pow_checked(x, 2.0, opset=opset)
    assert result.shape == () and result.dtype == F16 and float(result) == 9.0


@pytest.mark.parametrize("opset", [13, 15])
def test_python_float_exponent_with_bfloat16_base(opset):
    x = HALF_X.astype(BF16)
    result = pow_checked(x, 0.1, opset=opset)  # 0.1 becomes float64 at Pow-12+
    assert result.dtype == BF16
    assert_within_ulp(result, pow_float_exact(x, np.array(0.1)), BF16)


@pytest.mark.parametrize("opset", [12, 13, 15, None])
def test_python_int_exponent_becomes_int64(opset):
    x = np.array([3, -3, 2, 7], dtype=I32)
    # 2**40 does not fit int32; as int64 it is an exact (wrapping) integer power
    result = pow_checked(x, 2**40, opset=opset)
    expected = wrap_int(np.array([pow(v, 2**40, 2**32) for v in (3, -3, 2, 7)], object), I32)
    assert_same_values(result, expected)
    assert_same_values(pow_checked(x, 2, opset=opset), np.array([9, 9, 4, 49], I32))
    assert_same_values(pow_checked(x, -1, opset=opset), np.array([0, 0, 0, 0], I32))


@pytest.mark.parametrize("opset", [12, 15])
def test_python_float_exponent_becomes_float64(opset):
    x = np.array([7, 9, -8, 2], dtype=I64)
    # float exponent: float64 pow truncated; (-8) ** 0.5 is NaN -> minimum
    result = pow_checked(x, 0.5, opset=opset)
    assert_same_values(result, np.array([2, 3, np.iinfo(I64).min, 1], I64))
    # 2 ** 2.9999999999 = 7.9999999994...: truncated 7 (float32(2.9999999999) would be 3.0)
    assert_same_values(pow_checked(x[3:], 2.9999999999, opset=opset), np.array([7], I64))
    x32 = np.array([2], dtype=I32)
    assert_same_values(pow_checked(x32, 2.9999999999, opset=opset), np.array([7], I32))


@pytest.mark.parametrize("opset", [7, 12, 15])
def test_python_float_exponent_large_value(opset):
    # 1e5 overflows float16 if the exponent were narrowed to X's dtype at Pow-12+ (and at
    # Pow-7 it takes X's dtype: float16(1e5) = inf, giving the same results for these bases)
    x = np.array([1.0, 0.5, -1.0], dtype=F16)
    result = pow_checked(x, 1e5, opset=opset)
    assert_same_values(result, np.array([1.0, 0.0, 1.0], F16))


def test_python_base_takes_exponent_dtype_at_pow7():
    y = np.array([0.5, 2.0, -1.0], dtype=F16)
    result = pow_checked(2.0, y, opset=7)
    assert result.dtype == F16
    assert_within_ulp(result, pow_float_exact(np.array(2.0, F16), y), F16)


def _common_call_bases(dtype, rng):
    if is_int(dtype):
        info = np.iinfo(dtype)
        special = np.array([v for v in _INT_BASES if info.min <= v <= info.max], dtype)
        many = rng.integers(-50, 50, (3, 70_000)).astype(dtype)
    else:
        with np.errstate(over="ignore"):  # (1e30 as float16)
            special = np.array(_FLOAT_BASES + _subnormal_and_max(dtype), dtype)
        many = rng.uniform(-3, 3, (3, 70_000)).astype(dtype)  # several chunks per row
    return [special, many, np.array(2, dtype), np.array([3], dtype)]


_COMMON_EXPONENTS = [3.7, -1.5, 2.0, 0.5, -1.0, -0.5, 3, 2, -3, 5, 2**40, 2**63 - 1, 1e300, -1e-300,
                     math.inf, math.nan]  # fmt: skip


def _general(x, y, **kwargs):
    """``pow`` on the general path, every decision made again: with an ``out`` of an ndarray
    subclass, which no plan takes."""
    shape = np.broadcast_shapes(np.shape(x), np.shape(y))
    dtype = np.asarray(x).dtype.newbyteorder("=")  # (the result's byte order is native)
    out = np.empty(shape, dtype).view(GeneralOut)
    return noo.pow(x, y, out=out, **kwargs).view(np.ndarray)


def _same_bits(actual: np.ndarray, expected: np.ndarray, what: str = "") -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    assert actual.tobytes() == expected.tobytes(), what


@pytest.mark.parametrize("dtype", [F32, F64, F16, BF16, I32, I64], ids=dtype_id)
def test_planned_calls_equal_the_general_path(dtype):
    """Bases with a Python exponent, or with a same-shape exponent array, run their kind's
    plan: made by the first call, run by the next; both give the general path's results bit
    for bit, small calls (on the calling thread) and large ones (on the pool) alike."""
    rng = np.random.default_rng(7)
    for x in _common_call_bases(dtype, rng):
        for y in _COMMON_EXPONENTS:
            want = _general(x, y)
            for call in ("miss", "hit"):
                _same_bits(noo.pow(x, y), want, what=f"{call} {x.shape} ** {y}")
        for ydtype in (dtype, F32, I64):
            ys = rng.uniform(-4, 4, x.shape).astype(ydtype)
            if not is_int(ydtype):
                with np.errstate(over="ignore"):  # (1e10 as float16)
                    ys.reshape(-1)[: len(_FLOAT_EXPONENTS)] = _FLOAT_EXPONENTS[: ys.size]
            want = _general(x, ys)
            for call in ("miss", "hit"):
                _same_bits(noo.pow(x, ys), want, what=f"{call} {x.shape} ** {ydtype} array")


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_plans_check_each_kind_of_call_once(dtype, monkeypatch):
    from numba_onnx_ops.ops.pow import decisions

    checked = []
    real_check = decisions.check
    monkeypatch.setattr(decisions, "check", lambda *a: checked.append(a[1]) or real_check(*a))
    x = np.linspace(0.5, 2, 3000, dtype=dtype).reshape(3, 1000)
    for _ in range(3):
        for y in _COMMON_EXPONENTS:
            noo.pow(x, y)
        noo.pow(x, x)
        noo.pow(x, x.astype(I32))
    # each value and dtype pair once, but a Python NaN (not equal to itself, so no key finds a
    # plan): checked on every call
    nans = sum(1 for y in _COMMON_EXPONENTS if y != y)
    assert len(checked) == len(_COMMON_EXPONENTS) - nans + 2 + 3 * nans
    checked.clear()
    for _ in range(2):  # errors: raised on every call, as no plan is kept for them
        with pytest.raises(TypeError, match="Pow-15: Y has dtype bool"):
            noo.pow(x, x > 1)  # an exponent dtype no version allows: the general path's error
        with pytest.raises(TypeError, match="Pow-15: X has dtype bool"):
            noo.pow(x > 1, 2.0)
    assert len(checked) == 4


@pytest.mark.parametrize(
    "x, y",
    [
        (np.arange(1.0, 7.0, dtype=F32)[::2], 3.7),  # strided base
        (np.arange(1.0, 13.0, dtype=F32).reshape(3, 4).T, 2.0),  # transposed base
        (np.arange(1.0, 13.0, dtype=F64).reshape(3, 4)[::-1, 1:], -1.5),  # negative strides
        (np.broadcast_to(np.arange(1.0, 5.0, dtype=F32), (3, 4)), 3),  # read-only, stride 0
        (np.arange(1.0, 9.0, dtype=F32).astype(ml_dtypes.bfloat16)[::2], 0.75),  # half type
        (np.arange(1, 13, dtype=np.int32).reshape(3, 4).T, 3),  # integer base
        (np.arange(1.0, 7.0, dtype=F32), np.arange(1.0, 7.0, dtype=F32).astype(">f4")),
        (np.arange(1.0, 7.0, dtype=F32), np.arange(1.0, 13.0, dtype=F32)[::2]),  # strided
        (np.arange(1.0, 7.0, dtype=F32), np.arange(1.0, 4.0, dtype=F32)[:, None]),  # broadcast
        (np.arange(1.0, 7.0, dtype=F32), np.float32(3.7)),  # a numpy scalar: typed
        (np.arange(1.0, 7.0, dtype=F32).astype(">f4"), 3.7),  # non-native byte order
        (np.arange(1.0, 7.0, dtype=F32), 0.0),  # x ** 0
        (np.arange(1.0, 7.0, dtype=F32), 1),  # x ** 1
        (np.arange(1.0, 7.0, dtype=F32), [2.0]),  # a list: no plan
    ],
    ids=str,
)
def test_calls_of_every_layout_equal_the_general_path(x, y):
    """Calls whose operands a calling thread's kernel does not take as they are (strided,
    broadcast, another byte order), typed scalars and the exponents that need no kernel give
    the general path's results on every call."""
    want = _general(x, y)
    for call in ("miss", "hit"):
        _same_bits(noo.pow(x, y), want, what=call)


def test_numpy_scalars_are_not_weakly_typed():
    x = np.array([1.5, 2.0], dtype=F16)
    with pytest.raises(TypeError):
        noo.pow(x, np.float64(2.0), opset=7)
    with pytest.raises(TypeError):
        noo.pow(x, np.float32(2.0), opset=1, broadcast=1)
    result = pow_checked(x, np.float16(2.0), opset=7)
    assert_same_values(result, np.array([2.25, 4.0], F16))


# ------------------------------------------------------------------------------------------
# calling conventions
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("xdtype", "ydtype"), [(F32, F32), (I64, I64), (BF16, F32)], ids=str)
def test_out_is_filled_and_returned(xdtype, ydtype):
    x, y = outer_operands(xdtype, ydtype)
    out = np.zeros(np.broadcast_shapes(x.shape, y.shape), dtype=xdtype)
    result = pow_checked(x, y, out=out)
    assert result is out
    assert_pow_matches(out, x, y)


@pytest.mark.parametrize("operands", ["arrays", "lists"])  # (lists: the general path)
def test_out_any_layout(operands):
    x, y = outer_operands(F64, F64)
    if operands == "lists":
        x, y = x.tolist(), y.tolist()
    shape = np.broadcast_shapes(np.shape(x), np.shape(y))
    base = np.full((2 * shape[0], 2 * shape[1]), 7.0)
    out = base[::2, ::2]
    assert pow_checked(x, y, out=out) is out
    assert_pow_matches(out, x, y)
    assert (base[1::2, :] == 7.0).all() and (base[:, 1::2] == 7.0).all()
    out_f = np.zeros(shape, order="F")
    assert pow_checked(x, y, out=out_f) is out_f
    assert_pow_matches(out_f, x, y)


def test_array_likes_go_through_asarray():
    assert_same_values(pow_checked([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]), np.array([1.0, 4.0, 9.0]))
    assert_same_values(pow_checked([2, 3], [3, 2]), np.array([8, 9], dtype=I64))


def test_zero_dim_result_is_an_array():
    result = pow_checked(np.array(2.0, F32), np.array(3.0, F32))
    assert result.shape == () and float(result) == 8.0


@pytest.mark.slow
def test_more_than_2_31_elements():
    # 64-bit indexing: a float16 result of 2**31 + 7 elements (4.3 GB), exponent 2 GB
    n = 2**31 + 7
    if available_memory_bytes() < 10 * 2**30:
        pytest.skip("needs about 7 GB of free memory")
    x = np.broadcast_to(np.array(2.0, dtype=F16), (n,))
    y = np.resize(np.arange(5, dtype=I8), n)  # 0, 1, 2, 3, 4, 0, ...
    result = noo.pow(x, y)
    assert result.shape == (n,) and result.dtype == F16
    table = np.array([1.0, 2.0, 4.0, 8.0, 16.0], dtype=F16).view(np.int16)
    chunk = 2**26
    for start in range(0, n, chunk):
        got = result[start : start + chunk].view(np.int16)
        want = table[y[start : start + chunk]]
        # positive floats order like their bit patterns: within 1 ulp of the exact power
        assert (np.abs(got.astype(np.int32) - want) <= 1).all(), start
