"""Exact references for checking results: integer Pow and the distance between floats in ulps.

The benchmark's agreement check and the test suite both use these.  Nothing here runs a kernel
of this package or a transcendental function of numpy or the C library: numpy's float64
``power`` is not correctly rounded everywhere (numpy 1.26 on AVX-512 machines), and a reference
must not share the error it looks for.  Integer Pow is computed with Python integers and
fractions, and where the power is irrational with ``decimal`` at 60 digits.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import numpy as np

# 60 digits (about 199 bits): an irrational x ** y lies closer than 2**-199 relative to a
# float64 rounding boundary essentially never, so its float64 rounding from here is correct.
_DECIMAL = decimal.Context(prec=60, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
# |x| ** n for |x| >= 2 is at least 2 ** n: beyond this many bits a float64 overflows (or,
# for a negative n, underflows to zero), so the exact power need not be formed.
_FLOAT64_BITS = 1100


def pow_int(x, y, dtype=None) -> np.ndarray:
    """ONNX Pow with an integer base, as the package's semantics define it.

    Parameters
    ----------
    x : array_like of int
        The bases.
    y : array_like
        The exponents, integer or float (float16, bfloat16, float32, float64), broadcast
        against ``x``.
    dtype : dtype, optional
        The result's integer dtype; default ``x``'s.

    Returns
    -------
    numpy.ndarray
        Integer ``y``: the exact power modulo 2**bits for ``y >= 0`` (0 ** 0 = 1), the
        truncated true value for ``y < 0`` (0 ** negative gives the dtype's minimum).  Float
        ``y``: the correctly rounded float64 value of x ** float64(y), truncated toward zero;
        NaN, infinite or out-of-range values give the dtype's minimum.
    """
    x = np.asarray(x)
    y = np.asarray(y)
    dtype = np.dtype(x.dtype if dtype is None else dtype)
    info = np.iinfo(dtype)
    bits = info.bits
    float_y = y.dtype.kind not in "iu"
    if float_y and y.dtype.itemsize == 2:  # float16, bfloat16: exactly through float32
        y = y.astype(np.float32)
    xb, yb = np.broadcast_arrays(x, y)
    result = np.empty(xb.shape, dtype)
    flat = result.reshape(-1)
    for i, (xv, yv) in enumerate(zip(xb.ravel().tolist(), yb.ravel().tolist(), strict=True)):
        xv = int(xv)
        if float_y:
            r = pow_float64(xv, float(yv))
            ok = math.isfinite(r) and info.min <= math.trunc(r) <= info.max
            flat[i] = math.trunc(r) if ok else info.min
        elif yv >= 0:
            v = pow(xv, int(yv), 1 << bits)
            flat[i] = v - (1 << bits) if info.min < 0 and v > info.max else v
        elif xv == 1:
            flat[i] = 1
        elif xv == -1:
            flat[i] = -1 if yv % 2 else 1
        else:
            flat[i] = info.min if xv == 0 else 0
    return result


def pow_float64(x: int, y: float) -> float:
    """The correctly rounded float64 value of ``x ** y`` for an integer ``x``, with C99
    ``pow``'s special values (the sign of a zero result is not kept)."""
    if y == 0 or x == 1:
        return 1.0
    if math.isnan(y):
        return math.nan
    if math.isinf(y):
        if x == -1:
            return 1.0
        return math.inf if (abs(x) > 1) == (y > 0) else 0.0
    if x == 0:
        return 0.0 if y > 0 else math.inf
    if y == int(y):
        return _exact_power_float(x, 1, int(y))
    if x < 0:
        return math.nan  # a negative base to a non-integer power
    # y = p / 2**m exactly (m >= 1): x ** y is rational only where x has an integer 2**m-th
    # root; otherwise it is irrational, so it never lies on a rounding boundary.
    q = Fraction(y)
    root, m = x, q.denominator.bit_length() - 1
    for _ in range(m):
        s = math.isqrt(root)
        if s * s != root:
            break
        root = s
    else:
        return _exact_power_float(root, 1, q.numerator)
    return float(_DECIMAL.power(decimal.Decimal(x), decimal.Decimal(y)))


def _exact_power_float(base: int, sign: int, n: int) -> float:
    """float64 rounding of sign * base ** n (Python's int and Fraction to float conversions
    round correctly)."""
    if n < 0:
        if abs(base) >= 2 and -n * (abs(base).bit_length() - 1) > _FLOAT64_BITS:
            return 0.0
        return float(Fraction(sign, base**-n))
    if abs(base) >= 2 and n * (abs(base).bit_length() - 1) > _FLOAT64_BITS:
        return math.copysign(math.inf, sign * (-1 if base < 0 and n % 2 else 1))
    try:
        return float(sign * base**n)
    except OverflowError:
        return math.copysign(math.inf, sign * (-1 if base < 0 and n % 2 else 1))


def _ordered(a: np.ndarray) -> np.ndarray:
    """Floats mapped onto int64 in the same order, adjacent floats on adjacent integers
    (+0 and -0 both on 0); any 2-, 4- or 8-byte float type, bfloat16 included."""
    signed = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    bits = np.ascontiguousarray(a).view(signed).astype(np.int64)
    lowest = np.int64(-(2 ** (8 * a.dtype.itemsize - 1)))
    return np.where(bits < 0, lowest - bits, bits)


def ulp_distance(a, b) -> np.ndarray:
    """Number of representable values of ``a``'s float type between ``a`` and ``b``, as float64.

    ``b`` is converted to ``a``'s type.  +0 and -0 are at distance 0, the largest finite value
    is 1 from infinity, NaN is at distance 0 from NaN and infinitely far from anything else.
    """
    a = np.asarray(a)
    b = np.asarray(b).astype(a.dtype)
    a, b = np.broadcast_arrays(a, b)
    oa, ob = _ordered(a), _ordered(b)
    # |oa - ob| can exceed int64 only when the signs differ; then add magnitudes in float64
    same_sign = (oa >= 0) == (ob >= 0)
    diff = np.where(
        same_sign,
        np.abs(np.where(same_sign, oa, 0) - np.where(same_sign, ob, 0)).astype(np.float64),
        np.abs(oa.astype(np.float64)) + np.abs(ob.astype(np.float64)),
    )
    nan_a, nan_b = np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))
    return np.where(nan_a | nan_b, np.where(nan_a & nan_b, 0.0, np.inf), diff)
