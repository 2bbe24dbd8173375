"""float16/bfloat16 products as float32 products over bounded panels, rounded once.

The kernels widen panels of the half operands to float32 (in parallel, F16C for float16), the
vector micro-kernel multiplies them accumulating in float32, in the float products' order (each
element one chain of fused multiply-adds over k, continued across K's panels), and each C tile
is narrowed into the result with one rounding: "accumulate in float32, round once".  Where the
micro-kernel does not apply (no AVX2 and FMA, or tiles narrower than a vector) numpy's sgemm
multiplies the panels.  The panels of A and B are bounded whatever the operands' size; the
float32 tiles of C grow as K gets shorter, up to the result's shape (see ``PANEL``).  Batches
of smaller bfloat16 products are widened whole instead (``run_half_batch``), and so are single
mid-size products of either type, on the calling thread (``widened_plan``).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ... import tuning
from ...core import plans
from ...core.broadcast import flat_buffer
from ...core.dtypes import kernel_view
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
BATCH_MAX = 1 << 23  # float32 elements of ``run_half_batch``'s copies (32 MiB)


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


def run_half_batch(a2, b2, batch, m, n, k, target) -> None:
    """``target[...] = a2 @ b2`` for C-contiguous half operands of smaller matrices in a batch:
    both widened to float32 whole (one launch), the float32 batch multiplied by the own
    kernels (``own.plan``: the micro-kernel, in the float products' order), the float32 result
    narrowed into ``target`` with one rounding (one launch): three launches for the batch, where
    the panels take three a matrix."""
    kind = kernel_view(a2)[1]
    af = np.empty(a2.shape, _F32)
    bf = np.empty(b2.shape, _F32)
    abuf, aorg, _ = flat_buffer(kernel_view(a2)[0])
    bbuf, borg, _ = flat_buffer(kernel_view(b2)[0])
    parallel.launch(
        _k.widen_panels, abuf, aorg, k, 1, af.reshape(-1, k), bbuf, borg, n, 1,
        bf.reshape(-1, n), kind,
    )  # fmt: skip
    cf = np.empty(batch + (m, n), _F32)
    own.plan(af, bf, batch, m, n, k)(af, bf, cf)
    out = kernel_view(target)[0].reshape(-1)
    parallel.launch(_k.narrow_panel, cf.reshape(-1, n), kind, out, 0, n)


def widened_takes(batch, m: int, n: int, k: int) -> bool:
    """Whether ``widened_plan`` takes a half product: one matrix (no batch dimensions) of at
    least ``tuning.HALF_WIDEN_MIN_ROWS`` rows and a vector of float32 columns, of more than
    ``DIRECT_HALF_MAX_MNK`` multiply-adds (fewer go to the direct kernel, which widens as it
    reads; from ``HALF_PANELS_MIN`` on the panels take it)."""
    return (
        not batch
        and m >= tuning.HALF_WIDEN_MIN_ROWS
        and own.vector_tile(_F32, n)[0] is not None
        and m * n * k > tuning.DIRECT_HALF_MAX_MNK
    )


def widened_plan(a2, b2, m: int, n: int, k: int):
    """The step ``step(a2, b2, target)`` of a half product that ``widened_takes``: both
    operands widened to float32 whole on the calling thread (``widen_panels``'s serial twin,
    any strides), the float32 product by its own plan (the micro-kernel, in the float products'
    order; on the pool from ``tuning.HALF_WIDEN_HERE_MAX`` multiply-adds on), and the float32
    result narrowed into ``target`` with one rounding: the panels' bits, in one panel each."""
    kind = kernel_view(a2)[1]
    here = m * n * k <= tuning.HALF_WIDEN_HERE_MAX
    inner = own.plan(np.empty((m, k), _F32), np.empty((k, n), _F32), (), m, n, k, here)
    # (a plan's operands share their layout and flags: their buffers' kind and indexing; the
    # buffers read-only whatever the operands' flags, for one compiled widening)
    buffer_a, buffer_b = own.buffer_of(a2, pool=True), own.buffer_of(b2, pool=True)
    _, aorg, (ars, acs) = flat_buffer(kernel_view(a2)[0])
    _, borg, (brs, bcs) = flat_buffer(kernel_view(b2)[0])
    entries = []  # (the twins' compiled entries for this plan's types, from its first call)

    def step(a2, b2, target):
        scratch = _scratch(m * k + k * n + m * n)
        af = scratch[: m * k].reshape(m, k)
        bf = scratch[m * k : m * k + k * n].reshape(k, n)
        cf = scratch[m * k + k * n : m * k + k * n + m * n].reshape(m, n)
        widening = buffer_a(a2), aorg, ars, acs, af, buffer_b(b2), borg, brs, bcs, bf, kind
        narrowing = cf, kind, kernel_view(target)[0].reshape(-1), 0, n
        if not entries:
            entries[:] = (
                parallel.here_entry(serial_twin(_k.widen_panels), *widening),
                parallel.here_entry(serial_twin(_k.narrow_panel), *narrowing),
            )
        entries[0](*widening)
        inner(af, bf, cf)
        entries[1](*narrowing)

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


def half_batch_takes(a2, b2, batch, m: int, n: int, k: int) -> bool:
    """Whether ``run_half_batch`` takes a half product: a batch of C-contiguous operands,
    N at least a vector of float32, and float32 copies of at most ``BATCH_MAX`` elements."""
    return (
        len(batch) > 0
        and a2.flags.c_contiguous
        and b2.flags.c_contiguous
        and own.vector_tile(_F32, n)[0] is not None
        and a2.size + b2.size + math.prod(batch) * m * n <= BATCH_MAX
    )


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
