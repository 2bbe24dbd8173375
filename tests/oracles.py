"""Oracles for the test suite, independent of numba_onnx_ops' kernels.

Everything here is computed with numpy in higher precision (float64, an 80-bit or wider
``np.longdouble``, mpmath where ``long double`` is no wider than float64), with exact Python
integers, or is transcribed from the spec pages in ``docs/spec``.  The one piece of the
package imported is ``numba_onnx_ops.bench.exact`` (integer Pow and ulp distances in pure
Python, shared with the benchmark's agreement check), which runs no kernel.  No oracle calls
numpy's or the C library's float ``pow``/``exp``/``log`` in float64 or narrower: those are not
correctly rounded everywhere.
"""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np

from numba_onnx_ops.bench.exact import pow_int, ulp_distance

# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I8, I16, I32, I64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
U8, U16, U32, U64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))

FLOATS = (F16, BF16, F32, F64)
HALFS = (F16, BF16)
SIGNED = (I8, I16, I32, I64)
UNSIGNED = (U8, U16, U32, U64)
INTS = SIGNED + UNSIGNED
#: every numeric dtype ONNX MatMul/Pow mention (the "bad dtype" sweep walks this list)
NUMERIC = FLOATS + INTS


def is_float(dtype) -> bool:
    return np.dtype(dtype) in FLOATS


def is_int(dtype) -> bool:
    return np.dtype(dtype) in INTS


def dtype_id(dtype) -> str:
    return np.dtype(dtype).name


# --------------------------------------------------------------------------------------------
# the operator tables, transcribed from MatMul.txt, Pow.md and semantics.md
# --------------------------------------------------------------------------------------------
MATMUL_SINCE = (1, 9, 13)
POW_SINCE = (1, 7, 12, 13, 15)

_MM1 = frozenset({F16, F32, F64})
_MM9 = _MM1 | {I32, I64, U32, U64}
SPEC_MATMUL_TYPES = {1: _MM1, 9: _MM9, 13: _MM9 | {BF16}}

_P1 = frozenset({F16, F32, F64})
_P12_T = _P1 | {I32, I64}
_P12_T1 = _P1 | set(INTS)
#: version -> (T for X, T1 for Y); at Pow-1 and Pow-7, Y is T as well
SPEC_POW_TYPES = {
    1: (_P1, _P1),
    7: (_P1, _P1),
    12: (_P12_T, _P12_T1),
    13: (_P12_T | {BF16}, _P12_T1),
    15: (_P12_T | {BF16}, _P12_T1 | {BF16}),
}


def resolved_version(since: tuple[int, ...], opset: int) -> int:
    """Newest operator version whose since_version <= opset (semantics.md, opset resolution)."""
    return max(v for v in since if v <= opset)


def pow_pairs(version: int) -> list[tuple[np.dtype, np.dtype]]:
    """Every legal (X dtype, Y dtype) pair of a Pow version."""
    t, t1 = SPEC_POW_TYPES[version]
    if version < 12:
        return [(d, d) for d in _sorted(t)]
    return list(itertools.product(_sorted(t), _sorted(t1)))


def _sorted(dtypes) -> list[np.dtype]:
    return [d for d in NUMERIC if d in dtypes]


def onnx_type_name(dtype) -> str:
    """ONNX's name for a numpy dtype: float32 -> 'float', float64 -> 'double', else same."""
    name = np.dtype(dtype).name
    return {"float32": "float", "float64": "double"}.get(name, name)


# --------------------------------------------------------------------------------------------
# exact rounding to a floating-point format and ulp distances
# --------------------------------------------------------------------------------------------
#: (precision p incl. the implicit bit, minimum normal exponent, maximum exponent)
FORMATS = {
    F16: (11, -14, 15),
    BF16: (8, -126, 127),
    F32: (24, -126, 127),
    F64: (53, -1022, 1023),
}


def max_finite(dtype) -> float:
    p, _, emax = FORMATS[np.dtype(dtype)]
    return float((2 - 2.0 ** (1 - p)) * 2.0**emax)


def round_to_format(values, dtype) -> np.ndarray:
    """Round float64/longdouble values to ``dtype`` with round-half-to-even, exactly once.

    Done by hand (quantise in long double, where every target value and every scaling is exact)
    so that no cast path's double rounding enters the oracle.
    """
    dtype = np.dtype(dtype)
    p, emin, emax = FORMATS[dtype]
    with np.errstate(invalid="ignore"):  # a signaling NaN comes out quiet, as it should
        v = np.array(values, dtype=np.longdouble, copy=True)
    finite = np.isfinite(v)
    x = v[finite]
    _, e = np.frexp(x)  # |x| = m * 2**e, 0.5 <= m < 1, so floor(log2|x|) = e - 1
    quantum_exp = np.maximum(e.astype(np.int64) - 1, emin) - (p - 1)
    q = np.ldexp(np.ones_like(x), quantum_exp.astype(np.int32))
    r = np.round(x / q) * q  # np.round rounds half to even; x / q is exact
    big = np.abs(r) > np.longdouble(max_finite(dtype))
    r[big] = np.copysign(np.longdouble(np.inf), r[big])
    v[finite] = r
    # every value is now representable in float64, so the remaining casts are exact
    return v.astype(np.float64).astype(dtype)


def ulp_of(values, dtype) -> np.ndarray:
    """Spacing of ``dtype`` at the magnitude of each value (as longdouble)."""
    p, emin, _ = FORMATS[np.dtype(dtype)]
    v = np.abs(np.asarray(values, dtype=np.longdouble))
    _, e = np.frexp(v)
    e = np.where(v == 0, emin + 1, e.astype(np.int64))  # frexp(0) has exponent 0
    exp = np.maximum(e - 1, emin) - (p - 1)
    return np.ldexp(np.ones_like(v), exp.astype(np.int32))


#: relative error of np.longdouble pow (x87 powl, measured ~2**-63; 4x margin)
LONGDOUBLE_POW_REL_ERR = 2.0**-61


def _show(idx, *arrays) -> str:
    rows = []
    for i in idx[:8]:
        rows.append("  at " + str(i) + ": " + ", ".join(repr(a[i]) for a in arrays))
    return "\n".join(rows)


def assert_within_ulp(actual, exact, dtype, *, max_ulp=1, rel_err=LONGDOUBLE_POW_REL_ERR, what=""):
    """Assert ``actual`` is within ``max_ulp`` of the correctly rounded value of ``exact``.

    ``exact`` is a high-precision approximation (float64 or longdouble) of the true value with
    relative error at most ``rel_err``; any correctly rounded value of a real number in that
    interval is accepted as the reference. NaN must match NaN; an infinite reference (or one far
    beyond the format's range) must be matched by the same infinity; a zero reference must be
    matched by a zero of the same sign (the sign of a pow result is exact).
    """
    dtype = np.dtype(dtype)
    actual = np.asarray(actual)
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype} != {dtype}"
    exact = np.asarray(exact, dtype=np.longdouble)
    assert actual.shape == exact.shape, f"{what}: shape {actual.shape} != {exact.shape}"
    act64 = actual.astype(np.float64)
    lo = round_to_format(exact * (1 - np.longdouble(rel_err)), dtype)
    hi = round_to_format(exact * (1 + np.longdouble(rel_err)), dtype)

    exact_nan = np.isnan(exact)
    bad = exact_nan != np.isnan(act64)

    overflow = np.abs(exact) >= np.longdouble(2 * max_finite(dtype))  # includes true infinities
    with np.errstate(over="ignore"):  # (only the sign is read: beyond float64 is infinite)
        bad |= overflow & (act64 != np.copysign(np.inf, exact.astype(np.float64)))

    zero_ref = exact == 0
    bad |= zero_ref & (act64 != 0)
    # the sign of a zero result is exact, also where a tiny value underflowed
    bad |= (act64 == 0) & ~exact_nan & (np.signbit(act64) != np.signbit(exact))

    rest = ~(exact_nan | overflow | zero_ref)
    dist = np.minimum(ulp_distance(actual, lo), ulp_distance(actual, hi))
    bad |= rest & ~(dist <= max_ulp)

    if bad.any():
        idx = [tuple(int(j) for j in i) for i in np.argwhere(bad)]
        raise AssertionError(
            f"{what}: {len(idx)} of {bad.size} elements not within {max_ulp} ulp of the correctly"
            f" rounded {dtype.name} reference (actual, reference, exact, ulp distance):\n"
            + _show(idx, actual, lo, exact, np.where(rest, dist, np.nan))
        )


def assert_same_values(actual, expected, *, what="", signed_zeros=True):
    """Exact equality of dtype, shape and values; NaN equals NaN; signed zeros must match
    unless ``signed_zeros=False`` (MatMul: the sign of a zero sum depends on the order)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if is_float(expected.dtype):
        a = actual.astype(np.float64)
        e = expected.astype(np.float64)
        same_sign = (np.signbit(a) == np.signbit(e)) | (not signed_zeros)
        bad = ~((a == e) & same_sign | (np.isnan(a) & np.isnan(e)))
    else:
        bad = actual != expected
    if bad.any():
        idx = [tuple(int(j) for j in i) for i in np.argwhere(bad)]
        raise AssertionError(
            f"{what}: {len(idx)} of {bad.size} elements differ (actual, expected):\n"
            + _show(idx, actual, expected)
        )


# --------------------------------------------------------------------------------------------
# MatMul oracles
# --------------------------------------------------------------------------------------------
def wrap_int(values, dtype) -> np.ndarray:
    """Reduce exact Python integers (object array) modulo 2**bits into ``dtype``."""
    dtype = np.dtype(dtype)
    bits = 8 * dtype.itemsize
    mod = 1 << bits
    half = 1 << (bits - 1)
    signed = dtype.kind == "i"

    def red(v):
        r = int(v) % mod
        return r - mod if signed and r >= half else r

    flat = [red(v) for v in np.asarray(values, dtype=object).ravel()]
    return np.array(flat, dtype=dtype).reshape(np.shape(values))


def matmul_exact_int(a, b) -> np.ndarray:
    """Exact integer matmul with Python ints, reduced modulo 2**bits (two's complement)."""
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.dtype == b.dtype
    exact = np.asarray(np.matmul(a.astype(object), b.astype(object)), dtype=object)
    return wrap_int(exact, a.dtype)


def matmul_float_reference(a, b):
    """(reference, bound) for a float matmul.

    The reference is the matmul of the exactly upcast inputs in long double (for float64 inputs)
    or float64 (narrower inputs): its own error is far below the bound. The bound is the classic
    forward error bound of any summation order, K * eps * (|A| @ |B|) in the accumulation
    precision (float32 for float16/bfloat16, per semantics.md), plus, for the half types, one ulp
    of the output type for the final rounding.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    dtype = a.dtype
    k = a.shape[-1]
    wide = np.longdouble if dtype == F64 else np.float64
    aw = a.astype(np.float32).astype(wide) if dtype in HALFS else a.astype(wide)
    bw = b.astype(np.float32).astype(wide) if dtype in HALFS else b.astype(wide)
    with np.errstate(all="ignore"):
        ref = np.matmul(aw, bw)
        magnitude = np.matmul(np.abs(aw), np.abs(bw))
    acc_eps = np.finfo(np.float32 if dtype in HALFS else dtype).eps
    tiny = np.finfo(np.float32 if dtype in HALFS else dtype).smallest_subnormal
    bound = k * float(acc_eps) * magnitude + k * float(tiny)
    if dtype in HALFS:
        bound = bound + ulp_of(np.abs(ref) + bound, dtype)
    return np.asarray(ref), np.asarray(bound)


def _exact_parts(v: float) -> tuple[int, int]:
    """``v`` (finite) as ``(mantissa, exponent)`` integers with ``v == mantissa * 2**exponent``."""
    m, e = math.frexp(v)
    return int(math.ldexp(m, 53)), e - 53


def _fma_exact(x: tuple[int, int], y: tuple[int, int], acc, p: int, emin: int, emax: int):
    """One step of the chain in exact integers: ``x * y + acc`` rounded once, to nearest with
    ties to even, to the format of precision ``p`` (subnormals included; overflow to an
    infinity, which later steps keep).  ``acc`` is ``(mantissa, exponent)`` or a float
    infinity; an exact zero is +0 (the chain starts from +0, and RN(-0 + +0) is +0)."""
    if isinstance(acc, float):
        return acc
    prod, e_prod = x[0] * y[0], x[1] + y[1]
    if not prod:
        return acc
    if not acc[0]:
        total, e0 = prod, e_prod
    else:
        e0 = min(e_prod, acc[1])
        total = (prod << (e_prod - e0)) + (acc[0] << (acc[1] - e0))
    if not total:
        return (0, 0)
    mag = abs(total)
    quantum = max(e0 + mag.bit_length() - p, emin - p + 1)
    shift = quantum - e0
    if shift > 0:
        r, rem = mag >> shift, mag & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and r & 1):
            r += 1
        mag, e0 = r, quantum
    if e0 + mag.bit_length() - 1 > emax:
        return math.copysign(math.inf, total)
    return (-mag if total < 0 else mag), e0


def _fma_chain_exact(a: np.ndarray, b: np.ndarray, acc_dtype: np.dtype) -> np.ndarray:
    p, emin, emax = FORMATS[acc_dtype]
    m, k = a.shape[-2:]
    n = b.shape[-1]
    out = np.empty(a.shape[:-2] + (m, n), np.float64)
    for idx in np.ndindex(a.shape[:-2]):
        rows = [[_exact_parts(float(v)) for v in row] for row in a[idx].tolist()]
        cols = [[_exact_parts(float(v)) for v in col] for col in b[idx].T.tolist()]
        for i, row in enumerate(rows):
            for j, col in enumerate(cols):
                acc = (0, 0)
                for kk in range(k):
                    acc = _fma_exact(row[kk], col[kk], acc, p, emin, emax)
                out[idx + (i, j)] = acc if isinstance(acc, float) else math.ldexp(*acc)
    return out.astype(acc_dtype)


def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(s, t)`` with ``s = fl(x + y)`` and ``s + t == x + y`` exactly (Knuth's TwoSum; float64,
    no overflow)."""
    s = x + y
    yy = s - x
    return s, (x - (s - yy)) + (y - yy)


def _round_to_odd(s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The float64 next to the exact ``s + t`` (``s`` its nearest float64) with an odd last
    mantissa bit, or ``s`` itself where ``t == 0``: rounding to odd."""
    bits = s.view(np.int64).copy()
    move = (t != 0) & (bits & 1 == 0) & np.isfinite(s)
    # (s != 0 wherever t != 0; int64 bits +1 / -1 move away from / toward zero, either sign)
    bits[move] += np.where(np.signbit(s[move]) == np.signbit(t[move]), 1, -1)
    return bits.view(np.float64)


def _fma_chain_float32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The chain for a float32 accumulator, vectorized over C: each product of two operands
    of at most 24 significant bits is exact in float64, ``product + acc`` is exact as TwoSum's
    pair, and that sum rounded to odd in float64 (53 bits) and then to nearest in float32 is
    the sum rounded once to nearest in float32: double rounding is innocuous when the first
    rounding is to odd with two or more extra bits (Boldo and Melquiond, "When double
    rounding is odd", 2005)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    acc = np.zeros(a.shape[:-1] + (b.shape[-1],), np.float64)
    for kk in range(a.shape[-1]):
        with np.errstate(invalid="ignore"):  # (an overflowed acc: its TwoSum error is NaN)
            s, t = _two_sum(a64[..., :, kk : kk + 1] * b64[..., kk : kk + 1, :], acc)
        acc = round_to_format(_round_to_odd(s, t), F32).astype(np.float64)
    return acc.astype(F32)


def matmul_fma_chain(a, b, acc_dtype=None) -> np.ndarray:
    """The float MatMul of the documented order, exactly: each element of C is the chain
    ``acc = 0; acc = fma(A[i, k], B[k, j], acc)`` for k in order, every step one rounding of
    the exact ``A[i, k] * B[k, j] + acc`` to ``acc_dtype`` (the operands' type unless given).
    Finite operands only; 2-D or broadcast batches.  A float32 accumulator over operands of at
    most float32's precision takes a vectorized exact construction (``_fma_chain_float32``);
    every other case, and the tests of that construction, exact integers."""
    a = np.asarray(a)
    b = np.asarray(b)
    acc_dtype = np.dtype(acc_dtype or a.dtype)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    if acc_dtype == F32 and a.dtype in (F16, BF16, F32) and b.dtype in (F16, BF16, F32):
        return _fma_chain_float32(a, b)
    return _fma_chain_exact(a, b, acc_dtype)


def assert_matmul_close(actual, a, b, *, what=""):
    """Integer dtypes: exact modular result. Float dtypes: within the forward error bound."""
    a = np.asarray(a)
    b = np.asarray(b)
    actual = np.asarray(actual)
    expected_shape = np.matmul(np.zeros(a.shape, np.int8), np.zeros(b.shape, np.int8)).shape
    assert actual.shape == expected_shape, f"{what}: shape {actual.shape} != {expected_shape}"
    assert actual.dtype == a.dtype, f"{what}: dtype {actual.dtype} != {a.dtype}"
    if is_int(a.dtype):
        assert_same_values(actual, matmul_exact_int(a, b), what=what)
        return
    ref, bound = matmul_float_reference(a, b)
    act = (
        actual.astype(np.float32).astype(ref.dtype)
        if a.dtype in HALFS
        else actual.astype(ref.dtype)
    )
    nan_ref = np.isnan(ref)
    with np.errstate(invalid="ignore"):
        err = np.abs(act - ref)
        bad = nan_ref != np.isnan(act)
        inf_ref = np.isinf(ref)
        bad |= inf_ref & (act != ref)
        finite = ~(nan_ref | inf_ref)
        bad |= finite & ~(err <= bound)
    if bad.any():
        idx = [tuple(int(j) for j in i) for i in np.argwhere(bad)]
        raise AssertionError(
            f"{what}: {len(idx)} of {bad.size} elements outside the error bound"
            " (actual, reference, bound):\n" + _show(idx, actual, ref, bound)
        )


# --------------------------------------------------------------------------------------------
# Pow oracles
# --------------------------------------------------------------------------------------------
def exponent_as_float64(y) -> np.ndarray:
    """The exponent's value converted to float64 (correctly rounded, via Python's float())."""
    y = np.asarray(y)
    if is_float(y.dtype):
        with np.errstate(invalid="ignore"):  # a signaling NaN comes out quiet, as it should
            return y.astype(np.float32).astype(np.float64) if y.dtype in HALFS else y.astype(F64)
    flat = [float(int(v)) for v in y.ravel()]
    return np.array(flat, dtype=np.float64).reshape(y.shape)


def base_as_longdouble(x) -> np.ndarray:
    x = np.asarray(x)
    with np.errstate(invalid="ignore"):  # a signaling NaN comes out quiet, as it should
        if x.dtype in HALFS:
            return x.astype(np.float32).astype(np.longdouble)
        return x.astype(np.longdouble)


def _odd_integer(y: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.isfinite(y) & (np.floor(y) == y) & (np.fmod(y, 2) != 0)


def c99_pow_special(x, y) -> tuple[np.ndarray, np.ndarray]:
    """(where, value): C99 Annex F.10.4.4's exact ``pow`` results, written out, on float64
    ``x`` and ``y`` of one shape; ``where`` is False for the ordinary cases (finite nonzero x,
    finite y, and not a negative x with a non-integer y)."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    odd = _odd_integer(y)
    inf, nan = np.inf, np.nan
    value = np.full(x.shape, np.nan)
    where = np.isnan(x) | np.isnan(y)  # NaN unless one of the rules below says otherwise
    with np.errstate(invalid="ignore"):
        rules = [
            # (condition, result), later rules win
            ((x == 0) & (y > 0), np.where(odd, x, 0.0)),
            ((x == 0) & (y < 0), np.where(odd, np.copysign(inf, x), inf)),
            (np.isinf(y) & (np.abs(x) < 1), np.where(y > 0, 0.0, inf)),
            (np.isinf(y) & (np.abs(x) > 1), np.where(y > 0, inf, 0.0)),
            (np.isinf(y) & (x == -1), np.ones(x.shape)),
            ((x == -inf) & (y < 0), np.where(odd, -0.0, 0.0)),
            ((x == -inf) & (y > 0), np.where(odd, -inf, inf)),
            ((x == inf) & (y < 0), np.zeros(x.shape)),
            ((x == inf) & (y > 0), np.full(x.shape, inf)),
            ((x < 0) & (x > -inf) & np.isfinite(y) & (np.floor(y) != y), np.full(x.shape, nan)),
            (x == 1, np.ones(x.shape)),
            (y == 0, np.ones(x.shape)),
        ]
    for cond, result in rules:
        value = np.where(cond, result, value)
        where |= cond
    return where, value


#: ``long double`` is x87's 80-bit format (or IEEE quad) here: its ``powl`` is an oracle for
#: float64 and narrower.  Elsewhere (64-bit ``long double``) mpmath computes each value.
LONGDOUBLE_IS_WIDE = np.finfo(np.longdouble).nmant >= 63


def pow_float_exact(x, y) -> np.ndarray:
    """x ** float64(y) in higher precision, for float X, as longdouble.

    With a wide ``long double``: ``powl`` (relative error ``LONGDOUBLE_POW_REL_ERR``).
    Otherwise: mpmath's value rounded correctly to X's dtype (so within any ``rel_err`` of
    the truth as far as X's dtype can tell).  C99's special values come from
    ``c99_pow_special``, never from a library's pow.
    """
    x = np.asarray(x)
    xl = base_as_longdouble(x)
    yd = exponent_as_float64(y)
    xb, yb = np.broadcast_arrays(xl, yd)
    xl, yd = xb.reshape(-1), yb.reshape(-1)  # copies where broadcast: full arrays for powl
    xd = xl.astype(np.float64)
    # the rules touch only these (a negative x: with a non-integer y)
    maybe = (xd == 0) | (xd == 1) | (xd < 0) | ~np.isfinite(xd) | ~np.isfinite(yd) | (yd == 0)
    special, value = c99_pow_special(xd[maybe], yd[maybe])
    result = np.empty(xl.shape, np.longdouble)
    result[maybe] = value  # NaN where ``special`` is False: filled below
    general = ~maybe
    general[maybe] = ~special
    if LONGDOUBLE_IS_WIDE:
        with np.errstate(all="ignore"):
            result[general] = np.power(xl[general], yd[general].astype(np.longdouble))
    else:
        result[general] = pow_mpmath_rounded(xl[general], yd[general], x.dtype)
    return result.reshape(xb.shape)


def pow_mpmath_rounded(x, y, dtype) -> np.ndarray:
    """mpmath's x ** y (finite nonzero x, finite y) at 256 bits, rounded to ``dtype`` once, by
    hand (subnormals included), as float64; negative x with a non-integer y gives NaN."""
    import mpmath  # the test extra has it; only some oracles need it

    p, emin, _ = FORMATS[np.dtype(dtype)]
    big = max_finite(dtype)
    out = np.empty(np.shape(x), np.float64)
    flat = out.reshape(-1)
    with mpmath.workprec(256):
        for i, (xv, yv) in enumerate(zip(np.ravel(x).tolist(), np.ravel(y).tolist())):
            xv, yv = float(xv), float(yv)
            if xv < 0 and yv != math.floor(yv):
                flat[i] = math.nan
                continue
            v = mpmath.power(mpmath.mpf(xv), mpmath.mpf(yv))
            _, e = mpmath.frexp(v)  # |v| = m * 2**e, 1/2 <= m < 1
            q = max(int(e) - 1, emin) - (p - 1)
            r = mpmath.ldexp(mpmath.nint(mpmath.ldexp(v, -q)), q)  # ties to even
            magnitude = math.inf if abs(r) > big else abs(float(r))
            flat[i] = -magnitude if v < 0 else magnitude  # mpmath has no -0
    return out


def pow_reference_int(x, y, dtype) -> np.ndarray:
    """semantics.md, integer X with integer or float Y (exact; float Y through the correctly
    rounded float64 power, never numpy's)."""
    return pow_int(x, y, dtype)


def assert_pow_matches(actual, x, y, *, what=""):
    """Assert Pow(x, y) per semantics.md: ulp bound for float X, exact for integer X."""
    x = np.asarray(x)
    y = np.asarray(y)
    if is_int(x.dtype):
        assert_same_values(actual, pow_reference_int(x, y, x.dtype), what=what)
    else:
        assert_within_ulp(actual, pow_float_exact(x, y), x.dtype, what=what)


# --------------------------------------------------------------------------------------------
# C99 Annex F.10.4.4 pow special values, as a table (x, y, result)
# --------------------------------------------------------------------------------------------
inf = math.inf
nan = math.nan
C99_POW_SPECIAL = [
    # pow(±0, y) = ±inf for y an odd integer < 0
    (0.0, -3.0, inf),
    (-0.0, -3.0, -inf),
    (0.0, -1.0, inf),
    (-0.0, -1.0, -inf),
    # pow(±0, -inf) = +inf
    (0.0, -inf, inf),
    (-0.0, -inf, inf),
    # pow(±0, y) = +inf for y < 0 finite and not an odd integer
    (0.0, -2.0, inf),
    (-0.0, -2.0, inf),
    (-0.0, -0.5, inf),
    # pow(±0, y) = ±0 for y an odd integer > 0
    (0.0, 3.0, 0.0),
    (-0.0, 3.0, -0.0),
    # pow(±0, y) = +0 for y > 0 and not an odd integer
    (0.0, 2.0, 0.0),
    (-0.0, 2.0, 0.0),
    (-0.0, 0.5, 0.0),
    (-0.0, inf, 0.0),
    # pow(-1, ±inf) = 1
    (-1.0, inf, 1.0),
    (-1.0, -inf, 1.0),
    # pow(+1, y) = 1 for any y, even NaN
    (1.0, nan, 1.0),
    (1.0, inf, 1.0),
    (1.0, -inf, 1.0),
    (1.0, -3.0, 1.0),
    # pow(x, ±0) = 1 for any x, even NaN
    (nan, 0.0, 1.0),
    (nan, -0.0, 1.0),
    (inf, 0.0, 1.0),
    (-inf, -0.0, 1.0),
    (0.0, 0.0, 1.0),
    (-0.0, -0.0, 1.0),
    (-2.0, 0.0, 1.0),
    # pow(x, y) = NaN for finite x < 0 and finite non-integer y
    (-2.0, 0.5, nan),
    (-1.0, -0.5, nan),
    (-0.25, 2.5, nan),
    # pow(x, -inf) = +inf for |x| < 1, +0 for |x| > 1
    (0.5, -inf, inf),
    (-0.5, -inf, inf),
    (2.0, -inf, 0.0),
    (-2.0, -inf, 0.0),
    # pow(x, +inf) = +0 for |x| < 1, +inf for |x| > 1
    (0.5, inf, 0.0),
    (-0.5, inf, 0.0),
    (2.0, inf, inf),
    (-2.0, inf, inf),
    # pow(-inf, y): -0 for odd integer y < 0, +0 for other y < 0,
    #               -inf for odd integer y > 0, +inf for other y > 0
    (-inf, -3.0, -0.0),
    (-inf, -2.0, 0.0),
    (-inf, -0.5, 0.0),
    (-inf, 3.0, -inf),
    (-inf, 2.0, inf),
    (-inf, 0.5, inf),
    # pow(+inf, y): +0 for y < 0, +inf for y > 0
    (inf, -2.0, 0.0),
    (inf, -0.5, 0.0),
    (inf, 3.0, inf),
    (inf, 0.5, inf),
    # NaN otherwise propagates
    (nan, 1.0, nan),
    (nan, -2.0, nan),
    (2.0, nan, nan),
    (-1.0, nan, nan),
    (0.0, nan, nan),
    # ordinary signs: a negative base to an odd integer power stays negative
    (-2.0, 3.0, -8.0),
    (-2.0, -1.0, -0.5),
    (-2.0, 2.0, 4.0),
]


# --------------------------------------------------------------------------------------------
# inputs: random operands and memory layouts
# --------------------------------------------------------------------------------------------
def random_array(rng: np.random.Generator, shape, dtype, *, scale: float = 1.0) -> np.ndarray:
    """Random values of ``dtype``: normal floats, integers over the dtype's full range."""
    dtype = np.dtype(dtype)
    if is_int(dtype):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    values = rng.standard_normal(shape) * scale
    return values.astype(np.float32).astype(dtype) if dtype in HALFS else values.astype(dtype)


LAYOUTS = ("C", "F", "strided", "negative", "readonly", "broadcast")


def as_layout(a: np.ndarray, layout: str) -> np.ndarray:
    """A view of ``a``'s values in the given memory layout.

    "broadcast" is the exception: it returns ``np.broadcast_to`` of the first index along every
    axis but the last (zero strides), so its values differ from ``a``; oracles read the returned
    array, never ``a``.
    """
    a = np.asarray(a)
    if layout == "C":
        return np.array(a, order="C", copy=True)
    if layout == "F":
        return np.array(a, order="F", copy=True)
    if a.ndim == 0 and layout in ("strided", "negative"):
        return a.copy()
    if layout == "strided":  # every other element along every axis
        buf = np.zeros(tuple(2 * s for s in a.shape), dtype=a.dtype)
        view = buf[(slice(None, None, 2),) * a.ndim]
        view[...] = a
        return view
    if layout == "negative":  # negative strides along every axis
        flipped = (slice(None, None, -1),) * a.ndim
        return a[flipped].copy()[flipped]
    if layout == "readonly":
        c = a.copy()
        c.setflags(write=False)
        return c
    if layout == "broadcast":
        if a.ndim == 0:
            return np.broadcast_to(a, ())
        if a.ndim == 1:
            return np.broadcast_to(a[:1], a.shape) if a.size else np.broadcast_to(a, a.shape)
        first = tuple(slice(0, 1) for _ in a.shape[:-1]) + (slice(None),)
        return np.broadcast_to(a[first], a.shape)
    raise ValueError(layout)


class Snapshot:
    """Copies of the inputs, to assert afterwards that nothing wrote to them."""

    def __init__(self, *arrays):
        self.arrays = arrays
        self.saved = [(np.asarray(a).copy(), np.asarray(a).tobytes()) for a in arrays]

    def assert_unchanged(self):
        for a, (copy, raw) in zip(self.arrays, self.saved, strict=True):
            a = np.asarray(a)
            assert a.shape == copy.shape and a.dtype == copy.dtype
            assert a.tobytes() == raw, "an input was modified"


def assert_fresh_result(result, *inputs):
    """A fresh, C-contiguous, writeable ndarray that shares no memory with the inputs."""
    assert type(result) is np.ndarray, type(result)
    assert result.flags.c_contiguous
    assert result.flags.writeable
    for a in inputs:
        if isinstance(a, np.ndarray):
            assert not np.shares_memory(result, a)


def call_checked(op, a, b, **kwargs):
    """Call ``op(a, b, **kwargs)``, then assert the inputs are untouched and, without ``out``,
    that the result is fresh."""
    snap = Snapshot(a, b)
    result = op(a, b, **kwargs)
    snap.assert_unchanged()
    if kwargs.get("out") is None:
        assert_fresh_result(result, a, b)
    return result


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (0 where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
