"""MatMul kernels over flat element buffers and per-matrix offset maps.

Every operand arrives as a 1-D buffer plus element offsets and strides, so one compiled kernel
per dtype serves every rank, layout (C, Fortran, strided, negative strides) and broadcast batch:
``a_off[b]`` is where batch entry ``b`` of A starts, and ``A[b, i, k]`` is
``a[a_off[b] + i * a_rs + k * a_cs]``.  ``out`` is a C-contiguous ``(batch, M, N)`` array.

Values are computed in the type of ``acc_proto``: float32 for float16/bfloat16, whose bits are
widened as they are read, and the operands' own type otherwise (for integers, wraparound
arithmetic in the type itself is exactly the result modulo 2**bits).  Each output element is
narrowed once, when it is stored.

- ``matmul_vector``: float32/float64 (and, with AVX-512DQ, int64/uint64) products with
  unit-stride B rows (or, packed, a transposed B), on the explicit-vector micro-kernel of
  ``microkernel.py``, reading A in place and B in place or packed in strips.
- ``matmul_direct``: most other products: a register-blocked broadcast kernel that reads A in
  place and copies one strip of B at a time (compiled with LLVM's SLP vectorizer).
- ``matmul_small``: batches of tiny matrices, read entirely in place.
- ``matmul_packed``: long K and large half-type products: packed panels (halves widened once)
  and a register-blocked dot-product micro-kernel, K walked in blocks.
- ``matmul_rows_dot`` / ``matmul_cols_axpy``: matrix-vector shapes, bandwidth-bound.
- ``matmul_row_columns``: one row of A by a transposed B (``x @ W.T``), down B's columns.
- ``rows_of_columns``: a transposed A copied to C-contiguous rows, for the product to read.
- ``widen_panels`` / ``narrow_panel``: float32 panels of large half-type products, for sgemm.

Their speeds per shape: docs/design.md, "The own kernels".
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from ...runtime.convert import narrow, widen
from ...runtime.jit import helper, helper_overload, kernel
from ...runtime.schedule import call_state, set_chunksize, spread
from ...runtime.stack import c_view, heap_array, stack_array, view_as
from ...runtime.vectors import PAGE, page_offset, prefetch_rows_for_write
from ...tuning import PACK_ROWS, PREFETCH_MIN_K
from .microkernel import (
    call_whole,
    copy_cols,
    copy_rows,
    dot_cols,
    tile_cols,
    tile_rows,
    vector_tile,
)

# Micro-tile: MR rows of A against NR columns of B.  Both packed panels are contiguous along
# k, so LLVM vectorizes the k loop: per 8 k-steps, MR + NR vector loads feed MR * NR FMAs (or
# vpmulld + vpaddd) into 12 accumulators that stay in registers (see the module's tests for
# the asm check).  4x3: the fewest loads per FMA with 12 + 3 of the 16 ymm registers in use,
# the fastest of 4x3, 3x4, 2x6 and 2x4 (docs/design.md, "The own kernels").
MR = 4
NR = 3
# Panels are zero-padded along k to a multiple of the vector width so the vector loop never
# runs its scalar remainder (8 float32 lanes; 4 float64/int64 lanes divide it).
KPAD = 8

# Floats may be reassociated (the k loop becomes 8 partial sums) and contracted into FMAs.
# No nnan/ninf: NaN and infinity propagate as in exact arithmetic.
_FASTMATH = {"reassoc", "contract"}


@helper(fastmath=_FASTMATH)
def _micro(ap, ir_, bp, jr, kc, c, ci, cj, mr, nr):
    """c[ci:ci+mr, cj:cj+nr] += (ap[ir_:ir_+MR, :kc] @ bp[jr:jr+NR, :kc].T)[:mr, :nr]."""
    acc = c_view(stack_array(12, c), (MR, NR))
    for i in range(MR):
        for j in range(NR):
            acc[i, j] = 0
    for k in range(kc):
        for i in range(MR):
            for j in range(NR):
                acc[i, j] += ap[ir_ + i, k] * bp[jr + j, k]
    # Constant bounds with a guard (not range(mr)) keep every acc index a constant.
    for i in range(MR):
        for j in range(NR):
            if i < mr and j < nr:
                c[ci + i, cj + j] += acc[i, j]


@njit(inline="always")
def _at(buf, i):
    """buf[i] for an index known to be in range: as uint64, numba emits no negative-index
    wraparound, so consecutive indices stay consecutive addresses LLVM can vectorize."""
    return buf[np.uint64(i)]


@helper()
def _round_up(n, m):
    return (n + m - 1) // m * m


@helper()
def _pack(src, base, rs, cs, rows, cols, kind, dst):
    """dst[r, c] = src[base + r * rs + c * cs] widened, zero-padded to dst's shape.

    ``dst`` is contiguous along c (the k axis).  When the source is contiguous along c this
    is a vectorized copy (half bits convert with vcvtph2ps); otherwise it is a transpose, done
    8 source rows at a time so each destination row gets 8 contiguous stores per pass and
    the source lines stay in L1 across passes.
    """
    rp, cp = dst.shape
    if abs(cs) <= abs(rs):
        for r in range(rows):
            s = base + r * rs
            for c in range(cols):
                dst[r, c] = widen(_at(src, s + c * cs), kind)
    else:
        c8 = cols - cols % 8
        for c0 in range(0, c8, 8):
            for r in range(rows):
                s = base + r * rs + c0 * cs
                for c in range(8):
                    dst[r, c0 + c] = widen(_at(src, s + c * cs), kind)
        for r in range(rows):
            s = base + r * rs
            for c in range(c8, cols):
                dst[r, c] = widen(_at(src, s + c * cs), kind)
    for r in range(rows):
        for c in range(cols, cp):
            dst[r, c] = 0
    for r in range(rows, rp):
        for c in range(cp):
            dst[r, c] = 0


def _tile(out, bi, m0, n0, mi, nj, acc_proto):  # pragma: no cover - overloaded below
    raise NotImplementedError


def _store_tile(tile, out, bi, m0, n0, mi, nj, kind):  # pragma: no cover - overloaded below
    raise NotImplementedError


@helper_overload(_tile)
def _tile_ov(out, bi, m0, n0, mi, nj, acc_proto):
    """Where a task accumulates: ``(array, row0, col0)``.

    When the accumulator type is the output's, straight into the (zeroed) output; otherwise
    (half types) into a float32 tile of the task's size, narrowed once by ``_store_tile``.
    """
    if out.dtype == acc_proto.dtype:

        def direct(out, bi, m0, n0, mi, nj, acc_proto):
            c = out[bi]
            for i in range(m0, m0 + mi):
                for j in range(n0, n0 + nj):
                    c[i, j] = 0
            return c, m0, n0

        return direct

    def tile(out, bi, m0, n0, mi, nj, acc_proto):
        c = c_view(heap_array(mi * nj, acc_proto), (mi, nj))
        for i in range(mi):
            for j in range(nj):
                c[i, j] = 0
        return c, 0, 0

    return tile


@helper_overload(_store_tile)
def _store_tile_ov(tile, out, bi, m0, n0, mi, nj, kind):
    if out.dtype == tile.dtype:
        return lambda tile, out, bi, m0, n0, mi, nj, kind: None

    def store(tile, out, bi, m0, n0, mi, nj, kind):
        for i in range(mi):
            for j in range(nj):
                out[bi, m0 + i, n0 + j] = narrow(tile[i, j], kind, out)

    return store


@kernel(parallel=True)
def matmul_packed(
    a, a_off, a_rs, a_cs, b, b_off, b_rs, b_cs, kind, out, M, N, K, mt, nt, kc, mg, acc_proto
):
    """out[b] = A[b] @ B[b] through packed panels and the MR x NR micro-kernel.

    Tasks (``prange``) are disjoint output tiles: (batch entry, ``mt`` rows, ``nt`` columns).
    A task walks K in blocks of ``kc``.  Per block it packs its B block once (``nt x kc``,
    k contiguous; it stays in L2), then ``mg`` rows of A at a time (``mg x kc``; they stay in
    L1 while every NR-column sliver of the B block streams past them).  Extra memory per task:
    the two panels, plus an ``mt x nt`` float32 tile for half types.
    """
    nbatch = out.shape[0]
    mtiles = (M + mt - 1) // mt
    ntiles = (N + nt - 1) // nt
    per_batch = mtiles * ntiles
    kcp = _round_up(min(kc, K), KPAD)
    caller = call_state()
    for task in prange(nbatch * per_batch):
        spread(caller)
        bi = task // per_batch
        rest = task - bi * per_batch
        m0 = (rest // ntiles) * mt
        n0 = (rest % ntiles) * nt
        mi = min(mt, M - m0)
        nj = min(nt, N - n0)
        njp = _round_up(nj, NR)
        c, cm, cn = _tile(out, bi, m0, n0, mi, nj, acc_proto)
        # Flat buffers reshaped per block: a C-contiguous panel tells LLVM k is unit-stride.
        bbuf = heap_array(njp * kcp, acc_proto)
        abuf = heap_array(min(mg, _round_up(mi, MR)) * kcp, acc_proto)
        abase = a_off[bi] + m0 * a_rs
        bbase = b_off[bi] + n0 * b_cs
        for k0 in range(0, K, kc):
            kk = min(kc, K - k0)
            kkp = _round_up(kk, KPAD)
            bp = c_view(bbuf, (njp, kkp))
            _pack(b, bbase + k0 * b_rs, b_cs, b_rs, nj, kk, kind, bp)
            for i0 in range(0, mi, mg):
                ii = min(mg, mi - i0)
                iip = _round_up(ii, MR)
                ap = c_view(abuf, (iip, kkp))
                _pack(a, abase + i0 * a_rs + k0 * a_cs, a_rs, a_cs, ii, kk, kind, ap)
                for jr in range(0, njp, NR):
                    for ir_ in range(0, iip, MR):
                        _micro(
                            ap, ir_, bp, jr, kkp, c, cm + i0 + ir_, cn + jr,
                            ii - ir_, nj - jr,
                        )  # fmt: skip
        _store_tile(c, out, bi, m0, n0, mi, nj, kind)


# Direct kernel: an RB x SW output block (RB rows, two 32-byte vectors of columns) is held in
# a stack buffer, i.e. in registers, while k runs: per k, two vector loads of B and RB
# broadcasts of A feed 2 * RB independent FMA chains (8, enough to cover the FMA latency).
# The block is straight-line code over constant bounds, which the SLP vectorizer turns into
# vector code, so this kernel is compiled with SLP on (``kernel(slp=True)``).  With a single
# vector of columns (4 chains) 16x16 batches ran latency-bound, and with 8 rows SLP vectorized
# along the rows, gathering A.
RB = 4


def _lanes(proto, vectors):  # pragma: no cover - overloaded below
    raise NotImplementedError


@helper_overload(_lanes, inline="always")
def _lanes_ov(proto, vectors):
    """Accumulator elements in ``vectors`` (a literal) ymm registers, as a constant: the SLP
    vectorizer needs the block loops unrolled, so their bounds must be known to LLVM."""
    if not isinstance(vectors, types.IntegerLiteral):
        return None
    n = vectors.literal_value * 256 // proto.dtype.bitwidth

    return lambda proto, vectors: n


@kernel(parallel=True, slp=True, fastmath={"contract"})
def matmul_direct(
    a, a_off, a_rs, a_cs, b, b_off, b_rs, b_cs, kind, out, M, N, K, chunks, acc_proto
):
    """out[b] = A[b] @ B[b] with no per-matrix setup, for small and short-K products.

    Work items are (batch entry, strip of SW columns), split into ``chunks`` tasks.  Per
    item, the strip's K x SW slice of B is copied (widened, zero-padded) into the task's one
    buffer, where it stays in L1 while the row blocks of A, read in place, pass over it.  Rows
    past M re-read row M-1 and their results are dropped, so every block is full height.
    """
    SW = _lanes(acc_proto, 2)
    nstrips = (N + SW - 1) // SW
    items = out.shape[0] * nstrips
    per = (items + chunks - 1) // chunks
    caller = call_state()
    for t in prange(chunks):
        spread(caller)
        bs = heap_array(K * SW, acc_proto)  # 1-D: SLP needs provably consecutive loads
        acc = c_view(stack_array(64, acc_proto), (RB, SW))
        for item in range(t * per, min(items, (t + 1) * per)):
            bi = item // nstrips
            j0 = (item - bi * nstrips) * SW
            nw = min(SW, N - j0)
            bo = b_off[bi] + j0 * b_cs
            for k in range(K):
                bk = bo + k * b_rs
                for j in range(nw):
                    bs[k * SW + j] = widen(_at(b, bk + j * b_cs), kind)
                for j in range(nw, SW):
                    bs[k * SW + j] = 0
            ao = a_off[bi]
            c = out[bi]
            for i0 in range(0, M, RB):
                for r in range(RB):
                    for j in range(SW):
                        acc[r, j] = 0
                for k in range(K):
                    for r in range(RB):
                        aik = widen(_at(a, ao + min(i0 + r, M - 1) * a_rs + k * a_cs), kind)
                        for j in range(SW):
                            acc[r, j] += aik * bs[k * SW + j]
                for r in range(min(RB, M - i0)):
                    if nw == SW:
                        for j in range(SW):
                            c[i0 + r, j0 + j] = narrow(acc[r, j], kind, c)
                    else:
                        for j in range(nw):
                            c[i0 + r, j0 + j] = narrow(acc[r, j], kind, c)


@kernel(parallel=True, slp=True, fastmath={"contract"})
def matmul_small(a, a_off, a_rs, a_cs, b, b_off, b_rs, kind, out, M, N, K, acc_proto):
    """out[b] = A[b] @ B[b] for batches of tiny matrices (N of one to two vectors).

    B must have unit column stride and N >= SV.  One task per matrix, nothing copied: RB x SV
    blocks read B rows in place; the last column strip is shifted left to end at N (its
    overlap is computed twice, identically); the last M % RB rows go one at a time.
    """
    SV = _lanes(acc_proto, 1)
    mfull = M - M % RB
    flat = c_view(out, out.size)  # stored through _at's unsigned index, as A and B are read
    caller = call_state()
    for bi in prange(out.shape[0]):
        spread(caller)
        ao = a_off[bi]
        bo = b_off[bi]
        oo = bi * M * N
        acc = c_view(stack_array(32, acc_proto), (RB, SV))
        for j00 in range(0, N, SV):
            j0 = min(j00, N - SV)
            # Full blocks with constant bounds throughout (measured: a clamped row index or a
            # variable store count in this loop nest cost as much as the arithmetic).
            for i0 in range(0, mfull, RB):
                for r in range(RB):
                    for j in range(SV):
                        acc[r, j] = 0
                for k in range(K):
                    bk = bo + k * b_rs + j0
                    for r in range(RB):
                        aik = widen(_at(a, ao + (i0 + r) * a_rs + k * a_cs), kind)
                        for j in range(SV):
                            acc[r, j] += aik * widen(_at(b, bk + j), kind)
                for r in range(RB):
                    for j in range(SV):
                        flat[np.uint64(oo + (i0 + r) * N + j0 + j)] = narrow(acc[r, j], kind, out)
            for i in range(mfull, M):  # the last M % RB rows, one at a time
                for j in range(SV):
                    acc[0, j] = 0
                for k in range(K):
                    bk = bo + k * b_rs + j0
                    aik = widen(_at(a, ao + i * a_rs + k * a_cs), kind)
                    for j in range(SV):
                        acc[0, j] += aik * widen(_at(b, bk + j), kind)
                for j in range(SV):
                    flat[np.uint64(oo + i * N + j0 + j)] = narrow(acc[0, j], kind, out)


@helper()
def _vector_block(a, ao, a_rs, a_cs, b, bo, b_rs, c, co, c_rs, K, rows, tile, onto, skip):
    """One micro-kernel block: ``rows`` rows (at most MR) of a strip, A read with any strides,
    the sums started or, with ``onto``, continued from C, the first ``skip`` columns not
    stored.

    Full blocks of A with unit column stride get their own copy with both as constants: with
    the stride a variable, LLVM unrolls the K loop with an address per row and step and spills
    them to the stack, and a constant row count folds the edge checks away.  Only this one
    extra copy, and a function of its own, not inlined into its callers: every copy of the
    tile's code lengthens the first call's compilation, and edge blocks ran no faster with
    theirs (the measurements: docs/design.md, "The micro-kernel").
    """
    if a_cs == 1 and rows == tile_rows(tile):
        vector_tile(a, ao, a_rs, 1, b, bo, b_rs, c, co, c_rs, K, tile_rows(tile), tile, onto, skip)
    else:
        vector_tile(a, ao, a_rs, a_cs, b, bo, b_rs, c, co, c_rs, K, rows, tile, onto, skip)


@kernel(parallel=True)
def matmul_vector(
    a, a_off, a_rs, a_cs, b, b_off, b_rs, b_cs, out, M, N, K, onto, chunks, tile, pack
):
    """out[b] = A[b] @ B[b] for float32/float64 or 64-bit integers on the vector micro-kernel,
    or with ``onto`` out[b] continued by A[b] @ B[b]: each element's chain of fused
    multiply-adds over k, in order, goes on from the sum in ``out`` (so K in blocks, one call
    per block, gives the bits of one call).

    B must have unit column stride (or, with ``pack`` nonzero, unit row stride) and N >= the
    tile's width NR.  Work items are (batch entry, strip of NR columns), split into
    ``chunks`` tasks; per item the strip's row blocks each run the whole K loop in
    registers.  The last strip is shifted left to end at N: its overlap is computed twice,
    identically, or with ``onto`` stored by the strip before only (continued twice, it would
    count twice).  The last row block re-reads row M-1 and stores only the rows that exist.

    With ``pack`` nonzero each task takes its items in groups of ``pack`` and copies the
    group's strips, K rows of NR columns each, into consecutive rows of a panel of its own
    before the row blocks read them there (``own.packs_strips``): BLIS's packed panel of B,
    made where it is used, in parallel.  The copy walks ``PACK_ROWS`` rows of every strip of
    the group in turn, so each row of B it reaches is read along the group's columns, not one
    strip's (B's rows a page apart cost a TLB miss each time one is read).  A B of unit row
    stride (``b_cs`` not 1: a transposed B, the weights of ``x @ W.T``) has each strip copied
    whole, in turn, by ``copy_cols``, which transposes it in registers.  With ``pack`` 0 the
    row blocks read B in place.  The sums are the same.

    With K of at least ``PREFETCH_MIN_K``, each block first asks for the cache lines of the next
    block's C rows, so that their reads for ownership overlap this block's K loop instead of
    stalling its stores: C is written once and seldom in cache (the gain: docs/design.md, "The
    micro-kernel").  (Shorter K loops hide less of that latency and pay the call to the hints
    more often.)
    """
    MR = tile_rows(tile)
    NR = tile_cols(tile)
    flat = c_view(out, out.size)
    nstrips = (N + NR - 1) // NR
    items = out.shape[0] * nstrips
    per = (items + chunks - 1) // chunks
    saved = set_chunksize(1)  # tasks balanced as they run (see schedule.py)
    caller = call_state()
    for t in prange(chunks):
        spread(caller)
        panel = heap_array(K * NR * pack, b)
        packed = view_as(panel, b)  # (B's type: the row blocks' code compiled once)
        # (batch entry, strip) advance as counters: no division per item
        first = t * per
        last = min(items, first + per)
        bi = first // nstrips
        s = first - bi * nstrips
        for g in range(first, last, max(pack, 1)):
            count = min(max(pack, 1), last - g)  # (the group's items)
            if pack and b_cs != 1:  # B of unit row stride: each strip whole, in turn
                gb, gs = bi, s
                for q in range(count):
                    j0 = min(gs * NR, N - NR)
                    at = b_off[gb] + j0 * b_cs
                    copy_cols(panel, q * K * NR, NR, b, at, b_cs, K, tile)
                    gs += 1
                    if gs == nstrips:
                        gs = 0
                        gb += 1
            elif pack:  # the group's strips, PACK_ROWS rows of each in turn
                for k0 in range(0, K, PACK_ROWS):
                    kn = min(PACK_ROWS, K - k0)
                    gb, gs = bi, s
                    for q in range(count):
                        j0 = min(gs * NR, N - NR)
                        at = b_off[gb] + j0 + k0 * b_rs
                        copy_rows(panel, (q * K + k0) * NR, b, at, b_rs, kn, tile)
                        gs += 1
                        if gs == nstrips:
                            gs = 0
                            gb += 1
            for q in range(count):
                j0 = min(s * NR, N - NR)
                skip = s * NR - j0 if onto else 0
                ao = a_off[bi]
                src, bo, rs = b, b_off[bi] + j0, b_rs
                if pack:
                    src, bo, rs = packed, q * K * NR, NR
                co = bi * M * N + j0
                for i0 in range(0, M, MR):
                    if K >= PREFETCH_MIN_K:  # the next block's C rows
                        ahead = min(MR, M - i0 - MR)
                        prefetch_rows_for_write(flat, co + (i0 + MR) * N, ahead, N, NR)
                    _vector_block(
                        a, ao + i0 * a_rs, a_rs, a_cs, src, bo, rs, flat, co + i0 * N, N, K,
                        min(MR, M - i0), tile, onto, skip,
                    )  # fmt: skip
                s += 1
                if s == nstrips:
                    s = 0
                    bi += 1
    set_chunksize(saved)


@kernel(parallel=True)
def matmul_row_columns(a, a_off, a_cs, b, b_off, b_cs, out, N, K, chunks, tile):
    """out[b] = A[b] @ B[b] for float32/float64 products of one row of A by a B of unit row
    stride (a transposed B: ``x @ W.T``), by ``dot_cols`` on strips of NR columns: each
    element the chain of fused multiply-adds over k in order, from zero, the chain of the
    same row inside a batch on ``matmul_vector``, without copying B's strips first.  Items
    (batch entry, strip) split into ``chunks`` tasks balanced as they run; the last strip is
    shifted left to end at N (N at least NR), its overlap computed twice, identically."""
    NR = tile_cols(tile)
    flat = c_view(out, out.size)
    nstrips = (N + NR - 1) // NR
    items = out.shape[0] * nstrips
    per = (items + chunks - 1) // chunks
    saved = set_chunksize(1)
    caller = call_state()
    for t in prange(chunks):
        spread(caller)
        for item in range(t * per, min(items, (t + 1) * per)):
            bi = item // nstrips
            j0 = min((item - bi * nstrips) * NR, N - NR)
            dot_cols(a, a_off[bi], a_cs, b, b_off[bi] + j0 * b_cs, b_cs, K, flat, bi * N + j0,
                     tile)  # fmt: skip
    set_chunksize(saved)


@kernel(parallel=True)
def rows_of_columns(a, a_off, a_cs, out, M, K, chunks, tile):
    """out[b] = A[b], C-contiguous, for an A of unit row stride (a transposed A: ``A.T @ B``)
    whose element (i, k) is ``a[a_off[b] + i + k * a_cs]``: strips of NR columns (K at least
    NR), each copied by ``copy_cols`` (blocks transposed in registers), so that the product
    reads A's rows in place.  Items (batch entry, strip) split into ``chunks`` tasks; the
    last strip is shifted left to end at K, its overlap copied twice."""
    NR = tile_cols(tile)
    flat = c_view(out, out.size)
    nstrips = (K + NR - 1) // NR
    items = out.shape[0] * nstrips
    per = (items + chunks - 1) // chunks
    caller = call_state()
    for t in prange(chunks):
        spread(caller)
        for item in range(t * per, min(items, (t + 1) * per)):
            bi = item // nstrips
            j0 = min((item - bi * nstrips) * NR, K - NR)
            copy_cols(flat, bi * M * K + j0, K, a, a_off[bi] + j0 * a_cs, a_cs, M, tile)


@kernel(parallel=True)
def matmul_whole(a, a_off, a_rs, b, b_off, b_rs, out, chunks, fn):
    """out[b] = A[b] @ B[b] for float32/float64 batches of tiny matrices, by the function at
    address ``fn`` that holds their shape (``microkernel.define_whole``); the batch split into
    ``chunks`` tasks balanced as they run.  A and B must have unit column stride, N be the
    function's columns exactly."""
    nb = out.shape[0]
    per = (nb + chunks - 1) // chunks
    flat = c_view(out, out.size)
    saved = set_chunksize(1)
    caller = call_state()
    for t in prange(chunks):
        spread(caller)
        call_whole(fn, a, a_off, a_rs, b, b_off, b_rs, flat, t * per, min(nb, (t + 1) * per))
    set_chunksize(saved)


@kernel(parallel=True, fastmath=_FASTMATH)
def matmul_rows_dot(a, a_off, a_rs, a_cs, x, x_off, x_s, kind, out, M, K, rows, acc_proto):
    """out[b, i] = sum_k A[b, i, k] * x[b, k]: one dot product per row, ``rows`` rows per task.

    Matrix-vector products are bound by reading A once; with A contiguous along k (LLVM
    versions the loop on unit strides) the k loop is an 8-wide FMA reduction.
    """
    nbatch = out.shape[0]
    mtasks = (M + rows - 1) // rows
    caller = call_state()
    for t in prange(nbatch * mtasks):
        spread(caller)
        bi = t // mtasks
        i0 = (t - bi * mtasks) * rows
        xo = x_off[bi]
        acc = stack_array(1, acc_proto)
        for i in range(i0, min(M, i0 + rows)):
            arow = a_off[bi] + i * a_rs
            acc[0] = 0
            for k in range(K):
                acc[0] += widen(_at(a, arow + k * a_cs), kind) * widen(_at(x, xo + k * x_s), kind)
            out[bi, i] = narrow(acc[0], kind, out)


# Elements of ``matmul_cols_axpy``'s scratch on the stack: a band of at most 16 KiB of sums
# (``own.plan``) and a page, in 4-byte sums (8-byte sums take twice the bytes).
_AXPY_ROOM = 5120


@kernel(parallel=True, fastmath={"contract"})
def matmul_cols_axpy(x, x_off, x_s, b, b_off, b_rs, b_cs, kind, out, N, K, cols, acc_proto):
    """out[b, j] = sum_k x[b, k] * B[b, k, j]: rows of B scaled and added, ``cols`` per task.

    Vector-matrix products are bound by reading B once; each task keeps an accumulator strip
    of ``cols`` elements in L1 and streams its band of B, eight rows at a time: per vector of
    the strip, one load and one store of the sums carry eight fused multiply-adds, one per row
    in order of k (only contraction is allowed, no reassociation), so each sum is the same
    chain of FMAs over k as on the micro-kernel's paths.
    """
    nbatch = out.shape[0]
    ntasks = (N + cols - 1) // cols
    caller = call_state()
    for t in prange(nbatch * ntasks):
        spread(caller)
        bi = t // ntasks
        j0 = (t - bi * ntasks) * cols
        nj = min(cols, N - j0)
        # The sums half a page from B's band in the low address bits: a load from B that
        # matched the sums' store before it in those bits would wait on the store (4K
        # aliasing; measured: docs/design.md, "The own kernels").  On the stack, which
        # costs nothing per task, where the strip and the page fit (``own.plan``'s bands
        # always do): a heap block a page larger for every task cost batches of short rows
        # more than the stall.
        slack = PAGE // acc_proto.itemsize
        room = stack_array(_AXPY_ROOM, acc_proto)
        if nj + slack > room.size:
            room = heap_array(nj + slack, acc_proto)
        at = page_offset(b, b_off[bi] + j0 * b_cs) + PAGE // 2 - page_offset(room, 0)
        start = (at % PAGE) // acc_proto.itemsize
        acc = room[start : start + nj]
        for j in range(nj):
            acc[j] = 0
        xo = x_off[bi]
        k8 = K - K % 8
        for k in range(0, k8, 8):
            r0 = b_off[bi] + k * b_rs + j0 * b_cs
            x0 = widen(_at(x, xo + k * x_s), kind)
            x1 = widen(_at(x, xo + (k + 1) * x_s), kind)
            x2 = widen(_at(x, xo + (k + 2) * x_s), kind)
            x3 = widen(_at(x, xo + (k + 3) * x_s), kind)
            x4 = widen(_at(x, xo + (k + 4) * x_s), kind)
            x5 = widen(_at(x, xo + (k + 5) * x_s), kind)
            x6 = widen(_at(x, xo + (k + 6) * x_s), kind)
            x7 = widen(_at(x, xo + (k + 7) * x_s), kind)
            for j in range(nj):
                s = acc[j]
                r = r0 + j * b_cs
                s += x0 * widen(_at(b, r), kind)
                s += x1 * widen(_at(b, r + b_rs), kind)
                s += x2 * widen(_at(b, r + 2 * b_rs), kind)
                s += x3 * widen(_at(b, r + 3 * b_rs), kind)
                s += x4 * widen(_at(b, r + 4 * b_rs), kind)
                s += x5 * widen(_at(b, r + 5 * b_rs), kind)
                s += x6 * widen(_at(b, r + 6 * b_rs), kind)
                s += x7 * widen(_at(b, r + 7 * b_rs), kind)
                acc[j] = s
        for k in range(k8, K):
            xk = widen(_at(x, xo + k * x_s), kind)
            brow = b_off[bi] + k * b_rs + j0 * b_cs
            for j in range(nj):
                acc[j] += xk * widen(_at(b, brow + j * b_cs), kind)
        for j in range(nj):
            out[bi, j0 + j] = narrow(acc[j], kind, out)


# --- float16/bfloat16 products through float32 panels (``half_panels`` runs sgemm on them) ---


@kernel(parallel=True)
def widen_panels(a, a_org, a_rs, a_cs, af, b, b_org, b_rs, b_cs, bf, kind):
    """af[i, j] = float32 of the half element at ``a[a_org + i * a_rs + j * a_cs]``, and bf
    likewise from ``b``: float32 panels of both half operands in one launch (a panel with no
    rows is skipped; a launch costs tens of microseconds, the threads split the rows of both).
    The unit-stride case is a separate loop so that it vectorizes (F16C's vcvtph2ps, or a
    shift for bfloat16).
    """
    ma = af.shape[0]
    caller = call_state()
    for i in prange(ma + bf.shape[0]):
        spread(caller)
        if i < ma:
            _widen_row(a, a_org + i * a_rs, a_cs, kind, af[i])
        else:
            _widen_row(b, b_org + (i - ma) * b_rs, b_cs, kind, bf[i - ma])


@njit(inline="always")
def _widen_row(src, base, cs, kind, row):
    # ``_at``: numba's negative-index wraparound on ``src[base + j]`` kept LLVM from loading
    # consecutive elements as vectors, many times slower (docs/design.md, "Half types").
    if cs == 1:
        for j in range(row.size):
            row[j] = widen(_at(src, base + j), kind)
    else:
        for j in range(row.size):
            row[j] = widen(_at(src, base + j * cs), kind)


@kernel(parallel=True)
def narrow_panel(src, kind, dst, origin, rs):
    """dst[origin + i * rs + j] = half bits of ``src[i, j]``, rounded to nearest even: the one
    rounding of a float32 sum (``dst`` is the C-contiguous result's flat buffer)."""
    m, n = src.shape
    caller = call_state()
    for i in prange(m):
        spread(caller)
        base = origin + i * rs
        row = src[i]
        for j in range(n):
            dst[np.uint64(base + j)] = narrow(row[j], kind, dst)  # (no wraparound: see _at)


# --- bfloat16 products on AVX512_BF16's pair dot products ---------------------------------


@intrinsic
def _pair_bits(typingctx, lo, hi):
    """``lo | hi << 16`` of two bfloat16 bit patterns (uint16) as uint32, in 32-bit arithmetic:
    numba's own operators widen to 64 bits, which halved the vector lanes of the packing."""
    if lo != types.uint16 or hi != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        low, high = builder.zext(args[0], i32), builder.zext(args[1], i32)
        return builder.or_(low, builder.shl(high, ir.Constant(i32, 16)))

    return types.uint32(lo, hi), codegen


@intrinsic
def _exponent_or_max(typingctx, bits):
    """The exponent field of bfloat16 ``bits`` (uint16), 255 for a zero of either sign, in
    16-bit arithmetic (as ``_pair_bits``)."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        i16 = ir.IntType(16)
        field = builder.and_(builder.lshr(args[0], ir.Constant(i16, 7)), ir.Constant(i16, 0xFF))
        nonzero = builder.icmp_unsigned(
            "!=", builder.and_(args[0], ir.Constant(i16, 0x7FFF)), ir.Constant(i16, 0)
        )
        return builder.select(nonzero, field, ir.Constant(i16, 255))

    return types.uint16(bits), codegen


@helper()
def _pack_pairs(src, base, step, gap, nhi, count, dst):
    """dst[j] = src[base + j * step] | src[base + j * step + gap] << 16 (bits) for j < nhi, the
    low half alone for nhi <= j < count; returns the smallest exponent field among the
    nonzero elements read (255 if none).  A function of its own, not inlined into the
    kernel's loop body: inlined at both call sites, it made the kernel's first compile much
    longer (docs/design.md, "Compile time")."""
    low = np.uint16(255)
    zero = np.uint16(0)
    # The two unit-stride cases (a row of C-ordered A: its pairs side by side; two rows of
    # C-ordered B) with their steps as constants, so that the loops vectorize.
    if step == 1:
        for j in range(nhi):
            lo = _at(src, base + j)
            hi = _at(src, base + gap + j)
            dst[np.uint64(j)] = _pair_bits(lo, hi)
            low = min(low, _exponent_or_max(lo), _exponent_or_max(hi))
    elif step == 2 and gap == 1:
        for j in range(nhi):
            lo = _at(src, base + 2 * j)
            hi = _at(src, base + 2 * j + 1)
            dst[np.uint64(j)] = _pair_bits(lo, hi)
            low = min(low, _exponent_or_max(lo), _exponent_or_max(hi))
    else:
        for j in range(nhi):
            lo = _at(src, base + j * step)
            hi = _at(src, base + j * step + gap)
            dst[np.uint64(j)] = _pair_bits(lo, hi)
            low = min(low, _exponent_or_max(lo), _exponent_or_max(hi))
    for j in range(nhi, count):
        lo = _at(src, base + j * step)
        dst[np.uint64(j)] = _pair_bits(lo, zero)
        low = min(low, _exponent_or_max(lo))
    return low


@kernel(parallel=True)
def pack_bf16_pairs(a, a_offs, a_rs, a_cs, ap, b, b_offs, b_rs, b_cs, bp, K, emin):
    """Both operands of a batch of bfloat16 products as pairs along K, in one launch: for
    matrix ``bi`` (its elements from ``a_offs[bi]`` and ``b_offs[bi]``), ``ap[bi, i, p]`` =
    A[i, 2p] | A[i, 2p + 1] << 16 and ``bp[bi, p, j]`` = B[2p, j] | B[2p + 1, j] << 16 (bits;
    the missing high half of an odd K's last pair is zero).  ``emin[bi, r]`` gets the smallest
    exponent field among the nonzero elements of row r of ``ap[bi]`` (r < M) or of ``bp[bi]``
    (the rest), 255 where all are zero: the caller's check that no input is subnormal and no
    product can be.
    """
    nbatch, m, kp = ap.shape
    n = bp.shape[2]
    rows = m + kp
    caller = call_state()
    for t in prange(nbatch * rows):
        spread(caller)
        bi = t // rows
        r = t - bi * rows
        if r < m:
            row = a_offs[bi] + r * a_rs
            emin[bi, r] = _pack_pairs(a, row, 2 * a_cs, a_cs, K // 2, kp, ap[bi, r])
        else:
            p = r - m
            nhi = n if 2 * p + 1 < K else 0
            row = b_offs[bi] + 2 * p * b_rs
            emin[bi, r] = _pack_pairs(b, row, b_cs, b_rs, nhi, n, bp[bi, p])
