"""Which kernel a one-element exponent takes (its exponent class), decided from its value in
plain Python that numba compiles as well: the one rule of the entry point's plans
(``plan.scalar_class``) and of the ``@njit`` overload (``overloads``)."""

from __future__ import annotations

from .kernels import CUBE, GENERAL, IPOW, IPOW_LIMIT, RECIP, RSQRT, SQRT, SQUARE

# Classes that need no kernel: x ** 0 = 1 for every x (NaN included), x ** 1 = x.
ONE = -1
COPY = -2


def float_base_class(e, narrow):
    """The class of a float base's exponent of float64 value ``e``; ``narrow``: a base of at
    most four bytes (float32 and the half types square in float64 for integer exponents)."""
    if e == 0.0:
        return ONE
    if e == 1.0:
        return COPY
    if e == 2.0:
        return SQUARE
    if e == 3.0:
        return CUBE
    if e == 0.5:
        return SQRT
    if e == -1.0:
        return RECIP
    if e == -0.5:
        return RSQRT
    if narrow and -IPOW_LIMIT < e < IPOW_LIMIT and e == int(e):
        return IPOW
    return GENERAL


def int_base_class(n):
    """The class of an integer base's integer exponent ``n`` (any width or signedness)."""
    if n == 0:
        return ONE
    if n == 1:
        return COPY
    if n == 2:
        return SQUARE
    if n == 3:
        return CUBE
    if -IPOW_LIMIT < n < IPOW_LIMIT:
        return IPOW
    return GENERAL
