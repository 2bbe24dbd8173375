"""Type-generic element loads and stores shared by the kernels.

``widen(v, kind)`` turns an element as stored into the value type the kernel computes with
(half bits become float32, everything else stays as it is), and ``narrow(v, kind, out)`` turns
a computed value into the element type of ``out``.  They are ``@overload``-ed on the numba
types, so one kernel source serves every dtype; the ``kind`` code only matters for uint16
arrays, where it tells half bits (F16, BF16) from real uint16 data (NATIVE).
"""

from __future__ import annotations

from numba import types

from .half import NATIVE, f32_to_half, f64_to_half, half_to_f32
from .jit import helper_overload


def widen(v, kind):  # pragma: no cover - replaced by the overload inside njit code
    raise NotImplementedError


def narrow(v, kind, out):  # pragma: no cover - replaced by the overload inside njit code
    raise NotImplementedError


def _is_half_bits(t) -> bool:
    return isinstance(t, types.Integer) and t.bitwidth == 16 and not t.signed


@helper_overload(widen)
def _widen(v, kind):
    if _is_half_bits(v):
        # uint16 data is half bits for the matmul/pow operands that can be halves; a real
        # uint16 array is only ever a Pow exponent, which uses the exponent helpers instead.
        return lambda v, kind: half_to_f32(v, kind)
    return lambda v, kind: v


@helper_overload(narrow)
def _narrow(v, kind, out):
    odt = out.dtype
    if _is_half_bits(odt):
        if isinstance(v, types.Float) and v.bitwidth == 64:
            return lambda v, kind, out: f64_to_half(v, kind)
        return lambda v, kind, out: f32_to_half(types.float32(v), kind)
    return lambda v, kind, out: odt(v)


__all__ = ["widen", "narrow", "NATIVE"]
