"""Dtype helpers: bfloat16, input coercion, and the kernel-side representation of each dtype."""

from __future__ import annotations

import functools
import sys

import numpy as np

from ..runtime.half import BF16, F16, NATIVE

FLOAT16 = np.dtype(np.float16)


def is_bfloat16(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is ml_dtypes' bfloat16.  ml_dtypes is not imported for this (its
    import is slow: docs/design.md, "Import time"): an array of bfloat16 exists only once
    something has imported it, so until then no dtype is."""
    if dtype.kind != "V" or dtype.itemsize != 2:
        return False
    ml_dtypes = sys.modules.get("ml_dtypes")
    return ml_dtypes is not None and dtype.type is ml_dtypes.bfloat16


def is_half(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is float16 or bfloat16."""
    return dtype == FLOAT16 or is_bfloat16(dtype)


@functools.cache
def bfloat16() -> np.dtype:
    """ml_dtypes' bfloat16 dtype (imports ml_dtypes on first use)."""
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def kernel_view(a: np.ndarray) -> tuple[np.ndarray, int]:
    """Return ``(array numba can read, kind code)`` for a validated array of any layout."""
    if a.dtype == FLOAT16:
        return a.view(np.uint16), F16
    if is_bfloat16(a.dtype):
        return a.view(np.uint16), BF16
    return a, NATIVE


def as_input(value, op: str, name: str) -> np.ndarray:
    """Coerce the operand ``name`` of ``op`` to an ndarray without changing its dtype.

    Subclasses become plain ndarrays; non-native byte order becomes native (a copy); masked
    arrays are refused, since their mask would be silently dropped, and so is a value that is
    not an array and converts to Python objects (``None``, a ragged list), with what it is.
    """
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(f"{op}: masked arrays are not supported (the mask would be dropped)")
    a = np.asarray(value)
    if a.dtype.kind == "O" and not isinstance(value, np.ndarray):
        what = "None" if value is None else f"{type(value).__name__} {_brief(value)}"
        raise TypeError(
            f"{op}: {name} must be an array of numbers, got {what}, which converts to an array "
            "of Python objects"
        )
    if type(a) is not np.ndarray:
        a = a.view(np.ndarray)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def _brief(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_weak_scalar(value) -> bool:
    """A plain Python int or float (not bool, not a numpy scalar): weakly typed as in NumPy 2."""
    return type(value) in (int, float)
