"""float16/bfloat16 products as float32 products over bounded panels, rounded once.

The kernels widen panels of the half operands to float32 (in parallel, F16C for float16), the
vector micro-kernel multiplies them accumulating in float32, in the float products' order (each
element one chain of fused multiply-adds over k, continued across K's panels), and each C tile
is narrowed into the result with one rounding: "accumulate in float32, round once".  Where the
micro-kernel does not apply (no AVX2 and FMA, or tiles narrower than a vector) numpy's sgemm
multiplies the panels.  The panels of A and B are bounded whatever the operands' size; the
float32 tiles of C grow as K gets shorter, up to the result's shape (see ``PANEL``).  Mid-size
products, alone or in batches, and batches of smaller bfloat16 products are widened whole
instead, each operand in one pass (``widened_plan``).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ... import tuning
from ...core import plans
from ...core.broadcast import flat_buffer
from ...core.dtypes import is_bfloat16, kernel_view
from ...runtime import memory, parallel
from ...runtime.jit import serial_twin
from . import blas, own
from . import kernels as _k

_F32 = np.dtype(np.float32)

# float32 panels of A and B: at most this many elements each (4 MiB), whatever the operands'
# size; a 1024x1024 operand fits in one panel.  The tile of C and the one of partial sums are
# mb x nb each, mb and nb at most max(PANEL_MIN, PANEL // kc) with kc = min(K, PANEL_KMAX)
# (the result's rows and columns cut in even parts of at most that): 4 MiB each from K = 1024
# on, but for shorter K up to the result's shape in float32 (a 4096 x 4096 result with K = 16:
# about 134 MB of scratch).
PANEL = 1 << 20
PANEL_MIN = 256  # the bound on a tile's rows and columns, however long K is
PANEL_KMAX = PANEL // PANEL_MIN  # K is walked in blocks beyond this, the sums continued
# A batch in ``widened_plan`` whose float32 copies take more elements than this (32 MiB) goes in
# groups of entries whose copies fit the scratch a thread keeps (``SCRATCH_KEEP``).  Groups of
# batches up to it ran no faster than one fresh buffer (AMD Zen 3, one process, alternated,
# medians of 9, float16 128 x 128x64x128 on 1 thread 8.36 ms in one, 9.66 in two groups;
# bfloat16 8.58 / 8.73; on 2 threads 4.72 / 4.84 and 6.48 / 6.26).
BATCH_MAX = 1 << 23


def run_half_panels(a2, b2, batch, m, n, k, target) -> None:
    """``target[...] = a2 @ b2`` for validated 2-D-promoted half operands (batch dimensions
    ``batch``) into a C-contiguous ``target``.

    Per tile of C (mb x nb, all of K): widen a panel of A and of B to float32, multiply them
    accumulating in float32 (``_multiply``), and narrow the tile into the result.  A B panel
    serves every row tile; an A panel is widened once per column tile (once in all when one
    tile spans the columns).
    """
    kind = kernel_view(a2)[1]
    kc = min(k, PANEL_KMAX)
    # (tiles of even widths: a last column tile no narrower than half the others, so that it
    # takes the micro-kernel as they do, not BLAS and its order)
    nb = _even(n, max(PANEL_MIN, PANEL // kc))
    mb = _even(m, max(PANEL_MIN, PANEL // kc))
    scratch = _scratch(mb * kc + kc * nb + 2 * mb * nb)
    out = kernel_view(target)[0].reshape(-1)
    a3 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b3 = np.broadcast_to(b2, batch + b2.shape[-2:])
    for bi, index in enumerate(np.ndindex(*batch)):
        abuf, aorg, (ars, acs) = flat_buffer(kernel_view(a3[index])[0])
        bbuf, borg, (brs, bcs) = flat_buffer(kernel_view(b3[index])[0])
        for j0 in range(0, n, nb):
            nj = min(nb, n - j0)
            for i0 in range(0, m, mb):
                mi = min(mb, m - i0)
                for k0 in range(0, k, kc):
                    kk = min(kc, k - k0)
                    af, bf, cf, part = _panels(scratch, (mb, kc, nb), mi, kk, nj)
                    # Widen only what changed (a panel with no rows is skipped): B, unless
                    # this column tile's is still there; A, unless it is whole in one panel.
                    new_b = bf if i0 == 0 or kc < k else bf[:0]
                    new_a = af if j0 == 0 or mb < m or kc < k else af[:0]
                    ao = aorg + i0 * ars + k0 * acs
                    bo = borg + k0 * brs + j0 * bcs
                    parallel.launch(
                        _k.widen_panels,
                        abuf, ao, ars, acs, new_a, bbuf, bo, brs, bcs, new_b, kind,
                    )  # fmt: skip
                    _multiply(af, bf, cf, part, k0 > 0)
                parallel.launch(_k.narrow_panel, cf, kind, out, bi * m * n + i0 * n + j0, n)


def widened_takes(a2, b2, batch, m: int, n: int, k: int) -> bool:
    """Whether ``widened_plan`` takes a half product with a vector of float32 columns: one of
    more than ``tuning.DIRECT_HALF_MAX_MNK`` multiply-adds a matrix (fewer go to the direct
    kernel, which widens as it reads; from ``HALF_PANELS_MIN`` on the panels take it) and at
    least ``tuning.HALF_WIDEN_MIN_ROWS`` rows, alone or in a batch; or a batch of smaller
    bfloat16 products of C-contiguous operands, from ``tuning.HALF_BATCH_MIN`` multiply-adds in
    all."""
    if own.vector_tile(_F32, n)[0] is None:
        return False
    if m >= tuning.HALF_WIDEN_MIN_ROWS and m * n * k > tuning.DIRECT_HALF_MAX_MNK:
        return True
    return (
        bool(batch)
        and is_bfloat16(a2.dtype)
        and a2.flags.c_contiguous
        and b2.flags.c_contiguous
        and math.prod(batch) * m * n * k >= tuning.HALF_BATCH_MIN
    )


def widened_plan(a2, b2, batch, m: int, n: int, k: int):
    """The step ``step(a2, b2, target)`` of a half product that ``widened_takes``: both
    operands widened to float32 whole (``widen_panels``: a matrix with any strides, a batch's
    operands as matrices of all their rows, C-contiguous or copied so), the float32 product by
    its own plan (the micro-kernel, in the float products' order), and the float32 result
    narrowed into ``target`` with one rounding: the panels' bits, in one panel a matrix.  The
    widening and the narrowing run on the calling thread (the twins), the product there too up
    to ``tuning.HALF_WIDEN_HERE_MAX`` multiply-adds in all: the pool's other core would fetch
    the operands just written from this core's cache.  (Widened on the pool, batches ran no
    faster: AMD Zen 3, 2 threads, bfloat16 64 x 128x64x128 3.94 against 3.71 ms, 16 x 64^3
    324 against 286 us.)  A batch whose float32 copies would pass ``BATCH_MAX`` goes in groups
    of entries (``_in_groups``)."""
    nbatch = math.prod(batch)
    if nbatch > 1 and a2.size + b2.size + nbatch * m * n > BATCH_MAX:
        return _in_groups(a2, b2, batch, m, n, k)
    kind = kernel_view(a2)[1]
    copy_a = bool(batch) and not a2.flags.c_contiguous
    copy_b = bool(batch) and not b2.flags.c_contiguous
    if copy_a:  # (the copy's layout and flags, for the buffers below)
        a2 = np.empty(a2.shape, a2.dtype)
    if copy_b:
        b2 = np.empty(b2.shape, b2.dtype)
    rows_a, rows_b, rows_c = a2.size // k, b2.size // n, nbatch * m
    here = nbatch * m * n * k <= tuning.HALF_WIDEN_HERE_MAX
    inner = own.plan(np.empty(a2.shape, _F32), np.empty(b2.shape, _F32), batch, m, n, k, here)
    # (a plan's operands share their layout and flags: their buffers' kind and indexing; the
    # buffers read-only whatever the operands' flags, for one compiled widening)
    buffer_a, buffer_b = own.buffer_of(a2, pool=True), own.buffer_of(b2, pool=True)
    if batch:  # (C-contiguous: all the rows, one after another)
        aorg, ars, acs, borg, brs, bcs = 0, k, 1, 0, n, 1
    else:
        _, aorg, (ars, acs) = flat_buffer(kernel_view(a2)[0])
        _, borg, (brs, bcs) = flat_buffer(kernel_view(b2)[0])
    a_end = rows_a * k  # (A's, B's and C's float32 copies, one after another in the scratch)
    b_end = a_end + rows_b * n
    c_end = b_end + rows_c * n
    entries = []  # (the twins' compiled entries for this plan's types, from its first call)

    def step(a2, b2, target):
        if copy_a:
            a2 = np.ascontiguousarray(a2)
        if copy_b:
            b2 = np.ascontiguousarray(b2)
        scratch = _scratch(c_end)
        af = scratch[:a_end].reshape(rows_a, k)
        bf = scratch[a_end:b_end].reshape(rows_b, n)
        cf = scratch[b_end:c_end].reshape(rows_c, n)
        widening = buffer_a(a2), aorg, ars, acs, af, buffer_b(b2), borg, brs, bcs, bf, kind
        narrowing = cf, kind, kernel_view(target)[0].reshape(-1), 0, n
        if not entries:
            entries[:] = (
                parallel.here_entry(serial_twin(_k.widen_panels), *widening),
                parallel.here_entry(serial_twin(_k.narrow_panel), *narrowing),
            )
        entries[0](*widening)
        inner(af.reshape(a2.shape), bf.reshape(b2.shape), cf.reshape(target.shape))
        entries[1](*narrowing)

    return step


def _in_groups(a2, b2, batch, m: int, n: int, k: int):
    """The step of ``widened_plan`` for a batch whose float32 copies would pass ``BATCH_MAX``:
    its entries in groups whose copies fit the scratch the thread keeps (``SCRATCH_KEEP``), each
    group's operands C-contiguous (a view of a C-contiguous operand's matrices; else copied
    from its broadcast), one widened step a group.  A B of one matrix (``x @ W``) is widened
    with every group.  Same bits: a group changes no element's chain."""
    nbatch = math.prod(batch)
    shared = b2.ndim == 2
    per = m * k + m * n + (0 if shared else k * n)  # (an entry's copies)
    size = max(1, (SCRATCH_KEEP - (k * n if shared else 0)) // per)
    whole_a = a2.shape[:-2] == batch and a2.flags.c_contiguous  # (its matrices, as a view)
    whole_b = shared or (b2.shape[:-2] == batch and b2.flags.c_contiguous)
    steps = {}  # entries in a group -> its widened step

    def group_step(count):
        if count not in steps:
            ga = np.empty((count, m, k), a2.dtype)
            gb = np.empty((k, n) if shared else (count, k, n), b2.dtype)
            steps[count] = widened_plan(ga, gb, (count,), m, n, k)
        return steps[count]

    def entries(x, whole, i0, i1, tail):
        if whole:
            return x.reshape((nbatch,) + tail)[i0:i1]
        at = np.unravel_index(np.arange(i0, i1), batch)
        return np.broadcast_to(x, batch + tail)[at]  # (a C-contiguous copy)

    def step(a2, b2, target):
        out = target.reshape(nbatch, m, n)
        for i0 in range(0, nbatch, size):
            i1 = min(nbatch, i0 + size)
            ga = entries(a2, whole_a, i0, i1, (m, k))
            gb = b2 if shared else entries(b2, whole_b, i0, i1, (k, n))
            group_step(i1 - i0)(ga, gb, out[i0:i1])

    return step


SCRATCH_KEEP = 1 << 21  # float32 elements (8 MiB): a thread keeps a buffer up to this size


def _scratch(size: int) -> np.ndarray:
    """A float32 buffer of at least ``size`` elements: up to ``SCRATCH_KEEP``, this thread's,
    kept from call to call (``memory.scratch``; ``release_memory()`` drops it).  A fresh array
    of some hundred KiB faults its pages in on every call, which cost ten times the widening
    itself (float16 32x256x256 on AMD Zen 3: 125 against 13 us a call), and the 4 MiB of a
    512^3 product's panels 6% of the product (float16 on one thread, medians of 9 alternated
    rounds: 4.53 against 4.27 ms; bfloat16 4.50 against 4.21).  Larger ones, of products that
    take tens of milliseconds, are not kept (float16 1024^3, 16 MiB: 26.5 fresh, 27.2 ms kept,
    within the noise)."""
    return memory.scratch(size, _F32, SCRATCH_KEEP)


def _even(size: int, most: int) -> int:
    """The largest of equal parts (the last one shorter by less than one per part) that cut
    ``size`` into as few parts of at most ``most`` as can be."""
    return -(-size // -(-size // most))


def _multiply(af, bf, cf, part, onto: bool) -> None:
    """``cf = af @ bf`` in float32, or with ``onto`` ``cf += af @ bf`` continuing each element's
    chain of fused multiply-adds: where the vector micro-kernel's tile fits the columns, by
    the float32 product's own plan (``_float_plan``; continued, on the micro-kernel with B in
    place), else numpy's sgemm (partial sums added, through ``part``)."""
    mi, kk = af.shape
    nj = bf.shape[1]
    tile, nr = own.vector_tile(_F32, nj)
    if tile is not None and not onto:
        _float_plan(af, bf)(af, bf, cf)
        return
    if tile is not None:
        chunks = min(-(-nj // nr), 8 * numba.config.NUMBA_NUM_THREADS)
        parallel.launch(
            _k.matmul_vector, own.pool_buffer(af), _ORIGIN, kk, 1, own.pool_buffer(bf), _ORIGIN,
            nj, 1, cf.reshape(1, mi, nj), mi, nj, kk, onto, chunks, tile, 0,
        )  # fmt: skip
        return
    with np.errstate(all="ignore"):  # IEEE results, as the own kernels
        if not onto:
            blas.matmul(af, bf, out=cf)
        else:
            blas.matmul(af, bf, out=part)
            cf += part


_ORIGIN = np.zeros(1, np.int64)  # (each panel is one matrix from its first element)

_FLOAT_PLANS = plans.cache()


def _float_plan(af: np.ndarray, bf: np.ndarray):
    """The own kernels' plan of the float32 product of the C-contiguous panels ``af`` (M x K)
    and ``bf`` (K x N) into a C-contiguous tile: the float products' choices (B's strips copied
    where its rows lie far apart, the blocks of K, the row blocks), kept by shape as the entry
    points keep theirs (a plan holds no operand)."""
    (m, k), n = af.shape, bf.shape[1]
    step = _FLOAT_PLANS.get((m, k, n))
    if step is None:
        step = plans.keep(_FLOAT_PLANS, (m, k, n), own.plan(af, bf, (), m, n, k))
    return step


def _panels(scratch: np.ndarray, tile: tuple[int, int, int], mi: int, kk: int, nj: int):
    """C-contiguous views of ``scratch`` of exactly this tile's shapes: A panel (mi, kk),
    B panel (kk, nj), C tile and partial sums (mi, nj).  Offsets come from the largest tile
    ``(mb, kc, nb)``, so a panel kept for the next tile stays where it was."""
    mb, kc, nb = tile
    ob = mb * kc
    oc = ob + kc * nb
    op = oc + mb * nb
    return (
        scratch[: mi * kk].reshape(mi, kk),
        scratch[ob : ob + kk * nj].reshape(kk, nj),
        scratch[oc : oc + mi * nj].reshape(mi, nj),
        scratch[op : op + mi * nj].reshape(mi, nj),
    )
