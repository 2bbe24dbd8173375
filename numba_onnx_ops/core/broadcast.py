"""Shapes, broadcasting and the offset maps that let kernels read any layout in place."""

from __future__ import annotations

import numpy as np


def broadcast_shape(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcast of ``shapes``; a ``ValueError`` naming the operator and shapes if none."""
    first = tuple(shapes[0])
    if all(tuple(s) == first for s in shapes[1:]):
        return first  # the common case, without numpy's call (as costly as a small call's work)
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(tuple(s)) for s in shapes)
        raise ValueError(f"{op}: shapes {listed} do not broadcast") from None


def flat_buffer(a: np.ndarray) -> tuple[np.ndarray, int, tuple[int, ...]]:
    """A 1-D read-only view over the memory an array spans, plus how to index it.

    Returns ``(buf, origin, strides)`` with element ``a[i0, i1, ...]`` at
    ``buf[origin + i0 * strides[0] + i1 * strides[1] + ...]``.  Strides are in elements and
    may be negative or zero.  No data is copied unless the array is misaligned or its strides
    are not whole elements (rare views of packed records), where a compact copy is made.
    """
    item = a.itemsize
    flags = a.flags  # (each ``a.flags`` builds a new object)
    if flags.c_contiguous and flags.aligned and a.size:
        # The common case, without as_strided's cost.
        return contiguous_buffer(a), 0, tuple([s // item for s in a.strides])
    if not a.flags.aligned or any(s % item for s in a.strides):
        a = np.ascontiguousarray(a)
    strides = tuple(s // item for s in a.strides)
    if a.size == 0:
        return np.empty(0, a.dtype), 0, strides
    lowest, lo, length = _span(a.shape, strides)
    return _span_view(a, lowest, length), -lo, strides


def _span(shape: tuple[int, ...], strides) -> tuple[tuple[slice, ...], int, int]:
    """Of an array of ``shape`` and element ``strides``: the index (as slices) of its
    lowest-addressed element, that element's offset from the first, and the number of
    elements from it to the highest-addressed one."""
    lowest = tuple(slice(n - 1, n) if s < 0 else slice(0, 1) for n, s in zip(shape, strides))
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    return lowest, lo, 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))


def _span_view(a: np.ndarray, lowest: tuple[slice, ...], length: int) -> np.ndarray:
    """The read-only 1-D view of ``length`` elements from ``a``'s element at ``lowest``."""
    start = a[lowest].reshape(1)
    return np.lib.stride_tricks.as_strided(start, (length,), (a.itemsize,), writeable=False)


def flat_buffer_of(a: np.ndarray):
    """The function ``x -> flat_buffer(x)[0]`` for arrays of ``a``'s dtype, shape, strides and
    flags, with what depends only on those worked out now, once per kind of call.  An
    F-contiguous array's buffer is its C-contiguous transpose, flat (a view); any other
    layout's, the span from its lowest-addressed element, whose index and length are known
    here.  ``flat_buffer`` works both out on every call, which costs a small product more
    than its arithmetic (docs/design.md, "Call plans")."""
    flags = a.flags
    item = a.itemsize
    if not (flags.aligned and a.size) or any(s % item for s in a.strides):
        return lambda x: flat_buffer(x)[0]  # (copies, or no elements)
    if flags.c_contiguous:
        return contiguous_buffer
    if flags.f_contiguous:
        return lambda x: contiguous_buffer(x.T)
    lowest, _, length = _span(a.shape, [s // item for s in a.strides])
    return lambda x: _span_view(x, lowest, length)


def contiguous_buffer(a: np.ndarray) -> np.ndarray:
    """``flat_buffer``'s buffer of a C-contiguous, aligned array: a 1-D read-only view (one
    numba type for every layout).  ``ravel`` of a C-contiguous array always returns a new view
    (at half ``reshape``'s cost), so it is made read-only in place and ``a`` stays as it was
    (by ``setflags``: a third cheaper than the ``flags`` attribute, a noticeable part of a
    small call)."""
    buf = a.ravel()
    buf.setflags(write=False)
    return buf


def batch_offsets(
    origin: int, shape: tuple[int, ...], strides: tuple[int, ...], out_shape: tuple[int, ...]
) -> np.ndarray:
    """Element offset of each entry of a batch that broadcasts ``shape`` to ``out_shape``.

    One int64 per batch entry (per matrix, never per element), in C order of ``out_shape``;
    broadcast axes (missing or of size 1) contribute stride 0.
    """
    pad = len(out_shape) - len(shape)
    offsets = np.full((1,) * len(out_shape), origin, dtype=np.int64)
    for d, n in enumerate(out_shape):
        sd = d - pad
        if sd < 0 or shape[sd] == 1 or n == 1:
            continue
        step = np.arange(n, dtype=np.int64) * strides[sd]
        offsets = offsets + step.reshape((1,) * d + (n,) + (1,) * (len(out_shape) - d - 1))
    return np.ascontiguousarray(np.broadcast_to(offsets, out_shape)).reshape(-1)


def broadcast_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], out_shape: tuple[int, ...]
) -> list[int]:
    """Element strides of ``shape`` broadcast to ``out_shape``: 0 on broadcast axes."""
    pad = len(out_shape) - len(shape)
    result = [0] * len(out_shape)
    for d in range(len(shape)):
        if shape[d] != 1:
            result[d + pad] = strides[d]
    return result


def coalesce(shape: list[int], *stride_sets: list[int]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent axes that every operand walks as one; drop axes of length 1.

    Returns the shorter shape and the matching strides of each operand, so the innermost loop
    of an elementwise kernel is as long as the layouts allow.
    """
    new_shape: list[int] = []
    new_strides: list[list[int]] = [[] for _ in stride_sets]
    for d, n in enumerate(shape):
        if n == 1:
            continue
        if new_shape and all(new_strides[k][-1] == s[d] * n for k, s in enumerate(stride_sets)):
            new_shape[-1] *= n
            for k, s in enumerate(stride_sets):
                new_strides[k][-1] = s[d]
            continue
        new_shape.append(n)
        for k, s in enumerate(stride_sets):
            new_strides[k].append(s[d])
    if not new_shape:
        new_shape = [1]
        new_strides = [[0] for _ in stride_sets]
    return new_shape, new_strides
