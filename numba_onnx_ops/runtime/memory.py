"""Result buffers: large results reuse the memory of earlier results the caller has dropped.

Why: below 32 MiB, glibc's ``malloc`` keeps freed blocks and hands them out again, so a fresh
``numpy.empty`` costs nothing.  From 32 MiB on (its largest mmap threshold) every allocation is a
new ``mmap`` whose pages the kernel faults in and zeroes on first write, which costs as much as
a memory-bound Pow spends on its own work (docs/design.md, "The result pool").  onnxruntime avoids
that with its arena; this module does the same for large results only.

How: the pool keeps a reference to each large block it hands out (at most ``_MAX_BLOCKS``).  A
block whose only references are the pool's is free: the caller has dropped every array that
viewed it.  A call needing about the same size reuses a free block; free blocks of other sizes
are released at that point.  So the memory held beyond the caller's live arrays is at most the
results of recent calls that were dropped since; ``release_memory()`` gives it back at once,
with the scratch buffers threads keep from call to call (``scratch``).
"""

from __future__ import annotations

import math
import sys
import threading
import weakref

import numpy as np

from .. import tuning

_MAX_BLOCKS = 8  # blocks tracked, live or free; older ones are left to their owners
_SLACK = 1.25  # a free block serves a request this much smaller, not less
_ALIGN = 64  # a cache line, and a full AVX-512 vector

_lock = threading.Lock()
_blocks: list[np.ndarray] = []


def _free_flags(blocks: list[np.ndarray], free_refs: int) -> list[bool]:
    """For each block, whether only the pool references it."""
    return [sys.getrefcount(b) <= free_refs for b in blocks]


def _calibrate() -> int:
    """References a block has when only the pool's list holds it, counted exactly as
    ``_free_flags`` counts (the figure differs across Python versions)."""
    probe = [np.empty(1, np.uint8)]
    low = 1
    while not _free_flags(probe, low)[0]:
        low += 1
    return low


_FREE_REFS = _calibrate()


def empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous array, from the pool when it is large."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize  # (np.prod costs more than a small call's work)
    if nbytes < tuning.POOL_MIN_BYTES:
        return np.empty(shape, dtype)
    with _lock:
        block = None
        keep = []
        for b, free in zip(_blocks, _free_flags(_blocks, _FREE_REFS)):
            if not free:
                keep.append(b)
            elif block is None and nbytes <= b.size - _ALIGN <= nbytes * _SLACK:
                block = b
                keep.append(b)
            # other free blocks are dropped here: their memory goes back to the system
        if block is None:
            block = np.empty(nbytes + _ALIGN, np.uint8)
            keep.append(block)
        _blocks[:] = keep[-_MAX_BLOCKS:]
        offset = -block.ctypes.data % _ALIGN
        return block[offset : offset + nbytes].view(dtype).reshape(shape)


class _Kept:
    """One thread's kept scratch buffer (``scratch``)."""

    __slots__ = ("buf", "__weakref__")

    def __init__(self):
        self.buf = None


_thread = threading.local()
_kept: weakref.WeakSet = weakref.WeakSet()  # every live thread's ``_Kept``


def scratch(size: int, dtype: np.dtype, keep: int) -> np.ndarray:
    """An uninitialized buffer of at least ``size`` elements of ``dtype``: up to ``keep``
    elements, the calling thread's own, kept from call to call (a fresh one faults its pages in
    on every call) until the thread ends or ``release_memory()`` drops it; a larger one fresh.
    A thread holds one kept buffer, of one dtype, at a time."""
    if size > keep:
        return np.empty(size, dtype)
    kept = getattr(_thread, "kept", None)
    if kept is None:
        kept = _thread.kept = _Kept()
        with _lock:
            _kept.add(kept)
    buf = kept.buf
    if buf is None or buf.size < size or buf.dtype != dtype:
        buf = kept.buf = np.empty(size, dtype)
    return buf


def release_memory() -> None:
    """Give the memory of dropped large results back to the system now.

    Results of 32 MiB or more are carved from blocks that are kept after the caller drops the
    result, so that the next call of about that size does not pay for fresh pages.  Arrays
    still alive are not affected.  The scratch buffers that threads keep for their next call
    (up to 8 MiB each, for float16/bfloat16 products) are dropped too: a call running meanwhile
    keeps its own until it returns.
    """
    with _lock:
        _blocks[:] = [b for b, free in zip(_blocks, _free_flags(_blocks, _FREE_REFS)) if not free]
        for kept in list(_kept):
            kept.buf = None
