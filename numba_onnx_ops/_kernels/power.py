"""Elementwise Pow kernels over broadcast stride maps.

Operands arrive as flat buffers with an origin and per-axis element strides (0 on broadcast
axes, see ``_broadcast``); the output is a flat C-contiguous buffer.  Element rules follow
``shared/spec/semantics.md``: float bases through C99 ``pow`` in float64 then one rounding,
integer bases by squaring with wraparound, integer bases with float exponents truncated.
"""

from __future__ import annotations

import math

from numba import njit, prange, types
from numba.extending import overload

from .._dtypes import NATIVE
from .convert import narrow, widen
from .half import half_to_f32

# Inner-axis chunk per parallel task: long enough to amortize the row decomposition,
# short enough that a single long row still splits across both cores.
CHUNK = 16384


def exponent_as_f64(y, ykind):  # pragma: no cover - overloaded below
    raise NotImplementedError


def pow_element(x, y, xkind, ykind, imin):  # pragma: no cover - overloaded below
    raise NotImplementedError


@overload(exponent_as_f64)
def _exponent_as_f64(y, ykind):
    if isinstance(y, types.Integer) and y.bitwidth == 16 and not y.signed:

        def impl(y, ykind):
            if ykind == NATIVE:
                return types.float64(y)
            return types.float64(half_to_f32(y, ykind))

        return impl
    return lambda y, ykind: types.float64(y)


@njit
def _int_pow(x, y, imin):
    """x ** y for int64 x and integer y (any width or signedness), semantics.md's rules."""
    if y < 0:
        if x == 1:
            return types.int64(1)
        if x == -1:
            return types.int64(-1) if (y & 1) != 0 else types.int64(1)
        if x == 0:
            return imin
        return types.int64(0)
    e = types.uint64(y)
    base = types.int64(x)
    result = types.int64(1)
    while e != 0:  # square-and-multiply; int64 products wrap modulo 2**64
        if e & types.uint64(1):
            result *= base
        base *= base
        e >>= types.uint64(1)
    return result


@njit
def _int_pow_float(x, yf, imin):
    """Integer base, float exponent: the float64 power truncated toward zero, else imin."""
    r = math.pow(types.float64(x), yf)
    lo = types.float64(imin)
    # trunc(r) >= lo  <=>  r > lo - 1, and trunc(r) < -lo  <=>  r < -lo; NaN fails both.
    # At int64's edge lo - 1 rounds to lo, which only sends r == lo to imin: the same value.
    if r > lo - 1.0 and r < -lo:
        return types.int64(r)  # float -> int conversion truncates toward zero
    return imin


@overload(pow_element)
def _pow_element(x, y, xkind, ykind, imin):
    if isinstance(x, types.Integer) and x.signed:
        if isinstance(y, types.Float):
            return lambda x, y, xkind, ykind, imin: _int_pow_float(x, types.float64(y), imin)
        if y.bitwidth == 16 and not y.signed:  # uint16 data or half bits: decided at run time

            def impl_int_or_half(x, y, xkind, ykind, imin):
                if ykind == NATIVE:
                    return _int_pow(types.int64(x), y, imin)
                return _int_pow_float(x, exponent_as_f64(y, ykind), imin)

            return impl_int_or_half
        return lambda x, y, xkind, ykind, imin: _int_pow(types.int64(x), y, imin)

    def impl_float(x, y, xkind, ykind, imin):
        return math.pow(types.float64(widen(x, xkind)), exponent_as_f64(y, ykind))

    return impl_float


@njit(parallel=True, cache=True, nogil=True)
def pow_strided(x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin):
    """out.flat[i] = X[idx] ** Y[idx] over the broadcast (coalesced) ``shape``.

    Tasks are (row, chunk of the innermost axis) pairs, so both a single long row and many
    short rows split evenly; the row's starting offsets are decomposed once per task.
    """
    ndim = shape.size
    inner = shape[ndim - 1]
    nrows = out.size // inner
    nchunks = (inner + CHUNK - 1) // CHUNK
    xs = x_str[ndim - 1]
    ys = y_str[ndim - 1]
    for task in prange(nrows * nchunks):
        row = task // nchunks
        j0 = (task - row * nchunks) * CHUNK
        j1 = min(inner, j0 + CHUNK)
        xo = x_org
        yo = y_org
        rem = row
        for d in range(ndim - 2, -1, -1):
            idx = rem % shape[d]
            rem //= shape[d]
            xo += idx * x_str[d]
            yo += idx * y_str[d]
        base = row * inner
        for j in range(j0, j1):
            value = pow_element(x[xo + j * xs], y[yo + j * ys], xkind, ykind, imin)
            out[base + j] = narrow(value, xkind, out)
