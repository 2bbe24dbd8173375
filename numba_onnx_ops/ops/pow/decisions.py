"""Pow's decisions: the version, the dtypes (weak Python scalars included), Pow-1's legacy
broadcast and the result's shape, made from shapes and dtypes alone, before any data is read."""

from __future__ import annotations

import numbers

import numpy as np

from ...core.broadcast import broadcast_shape
from ...core.checks import check_dtype
from ...core.dtypes import as_input, is_weak_scalar
from ...core.versions import POW_ALLOWED, POW_LEGACY_BROADCAST, POW_SHARED_T, resolve_version

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def check(X, Y, opset, broadcast, axis):
    """Every decision of Pow that needs shapes and dtypes only, before any data is read.

    Returns ``(label, x, y, shape)``: the operands as arrays of their final dtypes (weak Python
    scalars converted), ``y`` reshaped to ``x``'s rank under Pow-1's legacy broadcast (after
    which numpy's broadcasting gives the same result), and the result's shape.  Raises what
    ``pow`` documents.
    """
    version = resolve_version("Pow", opset)
    label = f"Pow-{version}"
    legacy = version in POW_LEGACY_BROADCAST
    if not legacy and (broadcast is not None or axis is not None):
        raise TypeError(
            f"{label}: the broadcast and axis attributes exist only in Pow-1 (opset < 7)"
        )
    x, y = _operands(label, version, X, Y)
    if legacy and axis is not None:
        axis = _legacy_axis(label, axis, x.ndim)
    if legacy and not is_weak_scalar(Y):
        y = _legacy_broadcast(label, x, y, broadcast, axis)
        shape = x.shape
    else:
        shape = broadcast_shape(label, x.shape, y.shape)
    return label, x, y, shape


def _operands(label: str, version: int, X, Y) -> tuple[np.ndarray, np.ndarray]:
    """Arrays for X and Y with the version's dtype rules applied (weak scalars included)."""
    t, t1 = POW_ALLOWED[version]
    shared = version in POW_SHARED_T
    x_weak, y_weak = is_weak_scalar(X), is_weak_scalar(Y)
    if not shared:
        _check_weak_int(label, "X", X)
        _check_weak_int(label, "Y", Y)
    x = None if (shared and x_weak and not y_weak) else as_input(X, label, "X")
    y = None if (shared and y_weak and not x_weak) else as_input(Y, label, "Y")
    if x is None:
        check_dtype(label, "Y", y.dtype, t1)
        x = _weak(X, y.dtype)
    if y is None:
        check_dtype(label, "X", x.dtype, t)
        y = _weak(Y, x.dtype)
    check_dtype(label, "X", x.dtype, t)
    check_dtype(label, "Y", y.dtype, t1)
    if shared and x.dtype != y.dtype:
        raise TypeError(f"{label}: X and Y must have the same dtype, got {x.dtype} and {y.dtype}")
    return x, y


def _check_weak_int(label: str, name: str, value) -> None:
    """From Pow-12 on a Python int operand becomes int64: one outside its range is an error
    (as in NumPy 2), not another dtype."""
    if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
        raise OverflowError(
            f"{label}: {name} = {value} is a Python int outside int64, the dtype a Python int "
            "operand takes from Pow-12 on; pass a float, or an array of the dtype you mean"
        )


def _weak(value, dtype: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore"):  # 1e6 as float16 is inf, as in NumPy's weak promotion
        return np.asarray(value, dtype=dtype)


def _legacy_axis(label: str, axis, rank: int) -> int:
    """Pow-1's ``axis`` as a dimension of X: a negative one counts from the end; outside
    [-rank, rank - 1] (or not an integer) it is a ValueError, whatever Y is."""
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise ValueError(f"{label}: axis must be an integer, got {axis!r}")
    if not -rank <= axis < rank:
        raise ValueError(f"{label}: axis {axis} is out of range for X of rank {rank}")
    return int(axis) % rank


def _legacy_broadcast(label, x: np.ndarray, y: np.ndarray, broadcast, axis) -> np.ndarray:
    """Y reshaped to X's rank under Pow-1's rules (no size-1 expansion), or a ValueError;
    ``axis`` is already a dimension of X (``_legacy_axis``)."""
    if broadcast is None or broadcast == 0:
        if x.shape != y.shape:
            raise ValueError(
                f"{label}: without broadcast=1, X and Y must have the same shape; "
                f"got {x.shape} and {y.shape}"
            )
        return y
    if broadcast != 1:
        raise ValueError(f"{label}: broadcast must be 0 or 1, got {broadcast!r}")
    if y.size == 1 and y.ndim <= x.ndim:
        return y.reshape(())
    start = x.ndim - y.ndim if axis is None else axis
    if y.ndim > x.ndim or not 0 <= start <= x.ndim - y.ndim:
        raise ValueError(
            f"{label}: Y of shape {y.shape} cannot broadcast to X of shape {x.shape} at axis {axis}"
        )
    if x.shape[start : start + y.ndim] != y.shape:
        where = "the trailing dimensions" if axis is None else f"the dimensions from axis {axis}"
        raise ValueError(
            f"{label}: Y of shape {y.shape} must equal {where} of X of shape {x.shape} "
            "(Pow-1 has no size-1 expansion)"
        )
    return y.reshape((1,) * start + y.shape + (1,) * (x.ndim - start - y.ndim))
