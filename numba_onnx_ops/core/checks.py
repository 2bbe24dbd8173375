"""What both operators check the same way: a dtype against the version's table, ``out=``
and the result buffer the kernels fill, and whether an operand is a dask array."""

from __future__ import annotations

import sys

import numpy as np

from ..runtime import memory as _alloc
from .versions import dtype_names


def check_dtype(label: str, name: str, dtype: np.dtype, allowed) -> None:
    """``TypeError`` naming the operator version, the operand, its dtype and the allowed set."""
    if dtype not in allowed:
        raise TypeError(
            f"{label}: {name} has dtype {dtype}, which is not allowed; "
            f"allowed: {dtype_names(allowed)}"
        )


def prepare_out(label: str, out, shape: tuple[int, ...], dtype: np.dtype, inputs) -> tuple:
    """Validate ``out`` (or allocate a result) and pick the C-contiguous buffer kernels write.

    Returns ``(result, target)``: ``result`` is what the call returns, ``target`` a C-contiguous
    array of ``shape`` that the kernel fills.  When ``out`` is not C-contiguous or overlaps an
    input, ``target`` is a fresh array that the caller copies into ``out`` afterwards.
    """
    if out is None:
        result = _alloc.empty(shape, dtype)
        return result, result
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{label}: out must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"{label}: out has dtype {out.dtype}, the result has dtype {dtype}")
    if out.shape != tuple(shape):
        raise ValueError(f"{label}: out has shape {out.shape}, the result has shape {tuple(shape)}")
    if not out.flags.writeable:
        raise ValueError(f"{label}: out is read-only")
    if out.flags.c_contiguous and not any(np.may_share_memory(out, a) for a in inputs):
        return out, out
    return out, _alloc.empty(shape, dtype)


def finish(result: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Copy the kernel's buffer into ``out`` when they differ; return the result."""
    if target is not result:
        np.copyto(result, target, casting="no")
    return result


def dask_operand(*values) -> bool:
    """Whether any of ``values`` is a ``dask.array.Array`` (dask itself is never imported here:
    without ``dask.array`` in ``sys.modules`` no value can be one)."""
    da = sys.modules.get("dask.array")
    return da is not None and any(isinstance(v, da.Array) for v in values)
