"""Running a MatMul on the own kernels: kernel choice by shape, arguments, block sizes."""

from __future__ import annotations

import functools
import itertools
import math

import numba
import numpy as np
from llvmlite import ir

from ... import tuning
from ...core.broadcast import batch_offsets, contiguous_buffer, flat_buffer, flat_buffer_of
from ...core.dtypes import NATIVE, kernel_view
from ...runtime import parallel, pool
from ...runtime.cpu import cpu_features, fma512_halved, vector_bits
from ...runtime.jit import serial_twin
from ...runtime.numba_private import native_function, threads_now
from . import kernels as _k
from .microkernel import COLS_AT_ONCE, define_whole, tile_shape

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

_NTHREADS = numba.config.NUMBA_NUM_THREADS  # the pool size; reading it starts no threads


def run(a, b, batch, m, n, k, target) -> None:
    """``target[...] = a @ b`` for validated 2-D-promoted operands (batch dimensions ``batch``)
    into a C-contiguous ``target``, on the kernel that suits the shape."""
    plan(a, b, batch, m, n, k)(a, b, target)


def plan(a, b, batch, m, n, k, here: bool = False):
    """How the own kernels multiply operands of ``a``'s and ``b``'s dtype, shape, strides and
    flags: a function ``step(a, b, target)`` that fills a C-contiguous ``target``.  The kernel,
    its block sizes and the batch offsets are chosen here, once; a step takes the operands'
    memory and runs the kernel, on the calling thread for products of at most
    ``tuning.MATMUL_HERE_MAX`` multiply-adds (their serial twins, ``jit.serial_twin``), else on
    the pool (``MATMUL_HERE_MAX_INT64`` for 64-bit integers); with ``here``, on the calling
    thread whatever their size (operands that the calling thread has just written, which the
    pool's other cores would fetch from its cache)."""
    nbatch = math.prod(batch)
    av, kind = kernel_view(a)
    bv, _ = kernel_view(b)
    _, a_off, a_rs, a_cs = operand(av, batch, nbatch)
    _, b_off, b_rs, b_cs = operand(bv, batch, nbatch)
    given = batch, m  # (for the plans of copied operands)
    floats = a.dtype in (_F32, _F64) and takes_floats(a.dtype)
    if (
        floats
        and a_rs == 1
        and a_cs != 1
        and m > 1
        and n > 1
        and (nbatch * m * n * k >= tuning.ROWS_OF_A_MIN)
    ):
        # A of unit row stride (a transposed A): its rows copied out first, in registers
        rows = _with_rows_of_a(a, b, batch, nbatch, m, n, k, a_off, a_cs)
        if rows is not None:
            return rows
    stacked = stacked_rows(a_off, a_rs, b_off, m)
    if stacked is not None and (a_cs != 1 or b_cs != 1 or whole_function(a.dtype, m, n, k) is None):
        # B shared by the batch, A's matrices one after another at one row stride: one product
        # of all their rows (fuller blocks; of one row each, one pass over B instead of one a row)
        a_off, a_rs, b_off, m, nbatch = a_off[:1], stacked, b_off[:1], nbatch * m, 1
    acc = acc_proto(a.dtype)
    lanes = 32 // acc.itemsize  # accumulator elements in one 32-byte vector
    # B of unit row stride, each column contiguous (a transposed B, the weights of
    # ``x @ W.T``): the micro-kernel's tasks copy its strips into rows as they take them
    # (``copy_cols``), and one row of A runs down its columns (``matmul_row_columns``) in the
    # chain that row has inside a batch
    by_columns = floats and b_cs != 1 and (b_rs == 1 or k == 1)
    if n == 1:  # matrix-vector: one dot product per row

        def args(ab, bb, t):
            out = t.reshape(nbatch, m)
            return ab, a_off, a_rs, a_cs, bb, b_off, b_rs, kind, out, m, k, 256, acc

        return _step(_k.matmul_rows_dot, args, a, b, nbatch * m * k, nbatch * m, here)
    row_tile = vector_tile(a.dtype, n)[0] if m == 1 and by_columns else None
    if row_tile is not None:
        # one row by B's columns: each element's chain over B's column, in registers
        lanes = _tile_lanes(row_tile)
        nv = columns_at_once(a.dtype, b_cs, lanes, n) // lanes
        tile = tile_shape(1, nv, lanes)
        chunks = min(nbatch * -(-n // (nv * lanes)), 8 * _NTHREADS)

        def args(ab, bb, t):
            return ab, a_off, a_cs, bb, b_off, b_cs, t.reshape(nbatch, n), n, k, chunks, tile

        return _step(_k.matmul_row_columns, args, a, b, nbatch * n * k, nbatch * n, here)
    if m == 1 and not by_columns:  # vector-matrix: rows of B scaled and added
        # One band of columns per thread that runs it (the threads of the call, on the pool:
        # ``numba.set_num_threads`` may change them, so they are read at each call), of at most
        # 16 KiB of sums (in L1): B is read in the longest runs the prefetchers can follow
        # (bands of 512 columns cost a quarter more).  The bands do not change the sums' order.
        most = 16384 // acc.itemsize

        def band(threads):
            return min(most, -(-n // (threads * 64)) * 64)

        if runs_here(a.dtype, nbatch * n * k):
            cols = band(1)

            def args(ab, bb, t):
                out = t.reshape(nbatch, n)
                return ab, a_off, a_cs, bb, b_off, b_rs, b_cs, kind, out, n, k, cols, acc

        else:

            def args(ab, bb, t):
                out, cols = t.reshape(nbatch, n), band(threads_now())
                return ab, a_off, a_cs, bb, b_off, b_rs, b_cs, kind, out, n, k, cols, acc

        return _step(_k.matmul_cols_axpy, args, a, b, nbatch * n * k, nbatch * n, here)
    work = nbatch * m * n * k
    whole = whole_function(a.dtype, m, n, k) if a_cs == b_cs == 1 else None
    if whole is None and floats:
        if vector_tile(a.dtype, n)[0] is None:
            return _with_padded_columns(a, b, *given, n, k)
        if b_cs != 1 and not by_columns:
            return _with_unit_columns(a, b, *given, n, k)
    if whole is not None:
        chunks = min(nbatch, 8 * _NTHREADS)

        def args(ab, bb, t):
            return ab, a_off, a_rs, bb, b_off, b_rs, t.reshape(nbatch, m, n), chunks, whole

        return _step(_k.matmul_whole, args, a, b, work, nbatch * m * n, here)
    tile, nr = vector_tile(a.dtype, n) if b_cs == 1 or by_columns else (None, 0)
    if tile is not None:
        tile, nr = few_rows_tile(a.dtype, m, n, k, b_rs, tile, nr)
        kc = k_block(a.dtype, k)
        tile, groups = grouped_tile(a.dtype, nbatch, m, n, kc, tile, nr, work)
        if groups > 1:  # each matrix's rows as `groups` matrices of the batch
            rows = m // groups
            a_off = (a_off[:, None] + np.arange(groups) * rows * a_rs).reshape(-1)
            b_off = np.repeat(b_off, groups)
            chunks = nbatch * groups
        else:
            rows = m
            chunks = min(nbatch * -(-n // nr), 8 * _NTHREADS)
        mats = nbatch * groups
        pack = 0  # (strips a task copies at a time; none: B read in place)
        if by_columns or packs_strips(a.dtype, rows, k, b_rs):
            kc = k_block(a.dtype, k, packed=True)
            per = -(-mats * -(-n // nr) // chunks)  # (items a task)
            pack = max(1, min(per, tuning.PACK_PANEL // (kc * nr * a.dtype.itemsize)))
            tile = fitted_tile(rows, tile)
        steps = []
        for k0 in range(0, k, kc):  # (one block of all of K, but for long K)
            kk = min(kc, k - k0)
            a_at, b_at = a_off + k0 * a_cs, b_off + k0 * b_rs

            def args(ab, bb, t, a_at=a_at, b_at=b_at, kk=kk, onto=k0 > 0):
                out = t.reshape(mats, rows, n)
                return (ab, a_at, a_rs, a_cs, bb, b_at, b_rs, b_cs, out, rows, n, kk, onto,
                        chunks, tile, pack)  # fmt: skip

            work = nbatch * m * n * kk
            steps.append(_step(_k.matmul_vector, args, a, b, work, nbatch * m * n, here))
        return steps[0] if len(steps) == 1 else _in_turn(steps)
    if b_cs == 1 and lanes <= n < 2 * lanes and max(m, k) <= tuning.SMALL_MAX_MK:

        def args(ab, bb, t):
            out = t.reshape(nbatch, m, n)
            return ab, a_off, a_rs, a_cs, bb, b_off, b_rs, kind, out, m, n, k, acc

        return _step(_k.matmul_small, args, a, b, work, nbatch * m * n, here)
    if k <= tuning.DIRECT_KMAX and (kind == NATIVE or m * n * k <= tuning.DIRECT_HALF_MAX_MNK):
        items = nbatch * -(-n // (2 * lanes))
        chunks = min(items, 4 * _NTHREADS)

        def args(ab, bb, t):
            out = t.reshape(nbatch, m, n)
            return (ab, a_off, a_rs, a_cs, bb, b_off, b_rs, b_cs, kind, out, m, n, k, chunks,
                    acc)  # fmt: skip

        return _step(_k.matmul_direct, args, a, b, work, nbatch * m * n, here)
    blocks = packed_blocks(acc.itemsize, nbatch, m, n, k)

    def args(ab, bb, t):
        out = t.reshape(nbatch, m, n)
        return (ab, a_off, a_rs, a_cs, bb, b_off, b_rs, b_cs, kind, out, m, n, k, *blocks,
                acc)  # fmt: skip

    return _step(_k.matmul_packed, args, a, b, work, nbatch * m * n, here)


def stacked_rows(a_off: np.ndarray, a_rs: int, b_off: np.ndarray, m: int) -> int | None:
    """The row stride of the one product of all of A's rows that a batch of products is, or
    ``None`` where it is not one: B the same matrix for every entry (a 2-D B broadcast, ``x @
    W`` with x of rank 3 and more) and A's matrices one after another at one row stride (a
    C-contiguous A, a slice of one along the rows; single rows evenly apart).  The result's
    rows are consecutive either way.  Each element's chain is the same in the one product as
    in its batch entry's, so the bits are too."""
    if len(a_off) < 2 or not (b_off == b_off[0]).all():
        return None
    step = int(a_off[1] - a_off[0])
    if m > 1 and step != m * a_rs:
        return None
    if not (a_off == a_off[0] + np.arange(len(a_off)) * step).all():
        return None
    return step if m == 1 else a_rs


def columns_at_once(dtype: np.dtype, stride: int, lanes: int, n: int) -> int:
    """The columns of B (a multiple of ``lanes``, at most ``n`` rounded down to it, at least
    ``lanes``) that ``matmul_row_columns`` reads at once, ``stride`` elements apart:
    ``tuning.ROW_COLUMNS``, halved while their cache lines would fall in one set of L1 more
    often than it has ways (64 sets of at least 8 ways on AMD Zen 3 and Zen 4 and on Intel's
    Xeons).  Columns 4 KiB apart all fall in one set: 16 of them at once cost 1.6x 8 (the
    measurements: ``tuning.ROW_COLUMNS``)."""
    cols = tuning.ROW_COLUMNS
    step = abs(stride) * dtype.itemsize
    while cols > lanes and cols // len({j * step // 64 % 64 for j in range(cols)}) > 8:
        cols //= 2
    return max(lanes, min(cols, n // lanes * lanes))


def row_groups(dtype: np.dtype, nbatch: int, m: int, n: int, kc: int, mr: int, work: int) -> int:
    """Groups of rows of each matrix that ``matmul_vector``'s tasks take on the pool, each group
    with all the column strips: 1 (tasks of a strip with all rows) unless the product runs on
    the pool, its block of B (``kc`` rows by ``n``) fits ``tuning.ROW_GROUPS_MAX_B`` and the
    batch gives fewer than ``tuning.ROW_GROUPS_PER_THREAD`` tasks a thread.  Then every thread
    reads all of B, which stays in its L2 from call to call, where strips taken by whichever
    thread is free moved between the cores.  The most groups up to that count that divide M
    into groups of a multiple of ``mr`` rows (the register block's), 1 where none does.  Same
    sums: each element's chain of fused multiply-adds is the same in any task."""
    want = tuning.ROW_GROUPS_PER_THREAD * _NTHREADS
    if (
        runs_here(dtype, work)
        or nbatch >= want
        or kc * n * dtype.itemsize > tuning.ROW_GROUPS_MAX_B
    ):
        return 1
    for groups in range(min(-(-want // nbatch), m // mr), 1, -1):
        if m % groups == 0 and (m // groups) % mr == 0:  # (no edge block in any group)
            return groups
    return 1


def grouped_tile(dtype: np.dtype, nbatch: int, m: int, n: int, kc: int, tile: tuple, nr: int,
                 work: int):  # fmt: skip
    """``(tile, groups)`` of ``matmul_vector`` on the pool: ``tile`` (``nr`` columns) and its
    ``row_groups``, but a tile of four rows by the same vectors where ``tile``'s rows (six:
    CPUs with two 512-bit FMAs per cycle) divide no group, four rows do, and the batch's
    column strips alone would leave a thread without a task.  With B's strip in L1 four-row
    blocks run as fast as six; with it in L2 (up to ``tuning.ROW_GROUPS_MAX_B``) slower, but
    far less than the one task that left the second thread idle (docs/design.md, "The
    micro-kernel and register blocks per CPU").  Same sums: the tile does not change any
    element's chain."""
    mr = _tile_rows(tile)
    groups = row_groups(dtype, nbatch, m, n, kc, mr, work)
    if groups > 1 or mr <= 4 or nbatch * -(-n // nr) >= _NTHREADS:
        return tile, groups
    fewer = row_groups(dtype, nbatch, m, n, kc, 4, work)
    if fewer == 1:
        return tile, 1
    return _four_rows(tile), fewer


def fitted_tile(rows: int, tile: tuple) -> tuple:
    """``tile``, or on AVX2 (six rows of 32-byte vectors) the tile of four rows by the same
    vectors for B's strips packed (``packs_strips``) where ``rows`` (those passing each strip)
    is a multiple of four but not of six: no row block then computes rows that do not exist
    (128 rows take 22 blocks of six, the last with four rows to spare, or 32 of four).  Read
    from a packed strip in L1, four-row blocks keep the FMA units as busy as six.  Same sums:
    the tile does not change any element's chain."""
    if _tile_rows(tile) != 6 or vector_bits() != 256 or rows % 4 or rows % 6 == 0:
        return tile
    return _four_rows(tile)


def few_rows_tile(dtype: np.dtype, m: int, n: int, k: int, b_rs: int, tile: tuple, nr: int):
    """``(tile, nr)``, or on AVX2 for float32 products of at most ``tuning.FEW_ROWS_MAX`` rows
    with B read in place (``packs_strips`` false) the tile of four rows by three vectors (24
    columns) where its blocks compute fewer elements than ``tile``'s six rows by two vectors:
    rows not a multiple of six (the last block of six computes rows that do not exist), N
    wide enough that the wider strip's overlap does not undo it.  The same 12 accumulators,
    A read once per 24 columns instead of 16 (the measurements, and why not more rows:
    ``tuning.FEW_ROWS_MAX``).  Same sums: the tile does not change any element's chain."""
    if (
        dtype != _F32
        or vector_bits() != 256
        or _tile_rows(tile) != 6
        or m > tuning.FEW_ROWS_MAX
        or packs_strips(dtype, m, k, b_rs)
    ):
        return tile, nr
    lanes = _tile_lanes(tile)
    wide = 3 * lanes
    if n < wide:
        return tile, nr
    now = -(-m // 6) * 6 * -(-n // nr) * nr
    four = -(-m // 4) * 4 * -(-n // wide) * wide
    return (tile_shape(4, 3, lanes), wide) if four < now else (tile, nr)


def packs_strips(dtype: np.dtype, rows: int, k: int, b_rs: int) -> bool:
    """Whether ``matmul_vector``'s tasks copy the strips of B they take into consecutive rows
    before the row blocks read them: with at least ``tuning.PACK_MIN_ROWS`` rows passing each
    strip, where B's rows, read in place, span at least ``PACK_MIN_SPAN`` bytes over a block
    of K (``k_block``'s, with the strips packed).  Read in place from rows that far apart, a
    strip falls into few sets of L2 when the row stride is a large power of two, and each
    row block fetches it again from L3 (and with rows a page apart, each row costs a TLB
    miss).  The plan copies the strips in groups of up to ``tuning.PACK_PANEL`` bytes a task.
    The same sums: the copy changes where B is read, not what."""
    span = k_block(dtype, k, packed=True) * abs(b_rs) * dtype.itemsize
    return rows >= tuning.PACK_MIN_ROWS and span >= tuning.PACK_MIN_SPAN


def _tile_rows(tile: tuple) -> int:
    """MR of a ``vector_tile`` tile argument (``microkernel.tile_shape``: MR ints first)."""
    return sum(1 for t in tile if type(t) is int)


def _tile_cols(tile: tuple) -> int:
    """NV * W of a ``vector_tile`` tile argument (the columns of its block)."""
    return _tile_vectors(tile) * _tile_lanes(tile)


def _tile_vectors(tile: tuple) -> int:
    """NV of a ``vector_tile`` tile argument (its floats, after the MR ints)."""
    return sum(1 for t in tile if type(t) is float)


def _tile_lanes(tile: tuple) -> int:
    """The elements of one vector of a ``vector_tile`` tile argument (its bools, last)."""
    return len(tile) - _tile_rows(tile) - _tile_vectors(tile)


def _four_rows(tile: tuple) -> tuple:
    """The tile argument of four rows by ``tile``'s vectors."""
    return tile_shape(4, _tile_vectors(tile), _tile_lanes(tile))


def takes_floats(dtype: np.dtype) -> bool:
    """Whether ``plan`` takes every float32/float64 product of ``dtype``, in the documented
    order (each element of C one chain of fused multiply-adds over k in order, from zero;
    docs/design.md, "The accumulation order"), except matrix-vector products (N = 1: a
    reassociated dot product per row): where the CPU has the vector micro-kernel (AVX2 and
    FMA, or AVX-512), whose narrowest tile, one 32-byte vector of columns, takes any N."""
    return vector_tile(dtype, 32 // dtype.itemsize)[0] is not None


def k_block(dtype: np.dtype, k: int, packed: bool = False) -> int:
    """The micro-kernel's block of k: all of K up to ``tuning.VECTOR_KC`` (with B's strips
    packed, ``packs_strips``, ``PACKED_KC``), else even blocks of at most that, one
    ``matmul_vector`` call each (the sums continued from C), so that a strip of B (``kc`` rows
    of the tile's width) stays in L2 while the row blocks pass."""
    limits = tuning.PACKED_KC if packed else tuning.VECTOR_KC
    most = limits[dtype] if dtype in limits else k
    return -(-k // -(-k // most))


def _in_turn(steps):
    """The step that runs ``steps`` one after another."""

    def step(a, b, target):
        for s in steps:
            s(a, b, target)

    return step


def _with_padded_columns(a, b, batch, m, n, k):
    """The step of a float product narrower than the micro-kernel's narrowest tile (one 32-byte
    vector of columns): B zero-padded to that width (a C-contiguous copy of B's own elements),
    the product into a padded result, and its first ``n`` columns copied out.  The
    micro-kernel's order at the price of the copies; the padding's sums are never read."""
    width = 32 // a.dtype.itemsize
    padded = b.shape[:-1] + (width,)
    inner = plan(a, np.empty(padded, b.dtype), batch, m, width, k)
    wide = batch + (m, width)

    def step(a, b, target):
        bw = np.zeros(padded, b.dtype)
        bw[..., :n] = b
        out = np.empty(wide, target.dtype)
        inner(a, bw, out)
        target.reshape(wide[:-1] + (n,))[...] = out[..., :n]

    return step


def _with_rows_of_a(a, b, batch, nbatch, m, n, k, a_off, a_cs):
    """The step of a float product whose A has unit row stride and another column stride (a
    transposed A: ``A.T @ B``, ``np.asfortranarray(A)``), or ``None`` where K is shorter
    than one vector: A's rows copied to a C-contiguous array first (``rows_of_columns``,
    ``COLS_AT_ONCE`` columns at a time transposed in registers, on the calling thread for up to
    ``tuning.MATMUL_HERE_MAX`` elements), then the step of such an A, whose micro-kernel
    reads A's full blocks with constant strides.  Read in place, A's elements took an
    address per row and step that LLVM kept on the stack (the measurements:
    ``tuning.ROWS_OF_A_MIN``).  The same chains: the copy changes where A is read, not
    what."""
    lanes = vector_bits() // (8 * a.dtype.itemsize)
    if k < lanes:
        return None
    tile = tile_shape(1, max(1, min(COLS_AT_ONCE, k) // lanes), lanes)
    shape = batch + (m, k)
    inner = plan(np.empty(shape, a.dtype), b, batch, m, n, k)
    chunks = min(nbatch * -(-k // _tile_cols(tile)), 8 * _NTHREADS)

    def args(ab, bb, t):
        return ab, a_off, a_cs, t.reshape(nbatch, m, k), m, k, chunks, tile

    copy = _step(_k.rows_of_columns, args, a, a, nbatch * m * k, nbatch * m * k)

    def step(a, b, target):
        rows = np.empty(shape, a.dtype)
        copy(a, a, rows)
        inner(rows, b, target)

    return step


def _with_unit_columns(a, b, batch, m, n, k):
    """The step of a float product whose B has neither unit column stride nor unit row
    stride (a slice of every other row and column): a C-contiguous copy of B's own elements
    (its batch dimensions are not broadcast), then the step of such operands, so that the
    product takes the vector micro-kernel and its order.  (A B of unit row stride, a
    transposed one, is read by the micro-kernel's tasks themselves: ``copy_cols``.)"""
    inner = plan(a, np.empty(b.shape, b.dtype), batch, m, n, k)
    return lambda a, b, target: inner(a, np.ascontiguousarray(b), target)


def _step(kernel, args, a, b, work: int, size: int, here: bool = False):
    """The step of ``plan`` that runs ``kernel`` with ``args(a's buffer, b's buffer, target's
    kernel view)``: for at most ``tuning.MATMUL_HERE_MAX`` (64-bit integers:
    ``MATMUL_HERE_MAX_INT64``) multiply-adds, or with ``here``, on the calling thread
    (``_here_step``), else on the own pool (``_on_own_pool``) or numba's (``_on_layer``), with
    the pool's read-only buffers (one signature per dtype; the own pool's runner, once made,
    takes the flat operands themselves).  A pool step called where parallel loops run on one
    thread (``numba.set_num_threads(1)``) runs the calling thread's step instead, made on first
    need: the same order, without the launch (on the own pool, a microsecond less than its
    twin run alone through the runner on a 64x128x64 product)."""
    kind = kernel_view(a)[0].dtype
    native = kind == a.dtype  # (else a half type, viewed as its bits)
    if here or runs_here(a.dtype, work):
        return _here_step(kernel, args, a, b, size)
    buffer_a, buffer_b = buffer_of(a, pool=True), buffer_of(b, pool=True)
    if own_pool():
        start = _on_own_pool(kernel)
        # The runner calls the twin's compiled entry, which takes an operand whether it is
        # writable or not: the twin never writes it, and the entry reads an array's data,
        # shape and strides, not its flags.  So the runner takes the flat views the calling
        # thread's steps take, a third of the read-only ones' cost, which only the first call
        # needs, for the types the twin is compiled for.
        kept_a, kept_b = buffer_of(a, pool=False), buffer_of(b, pool=False)
    else:  # (the layer may launch through the dispatcher, which would compile for them)
        start = _on_layer(kernel)
        kept_a, kept_b = buffer_a, buffer_b
    alone = []  # the calling thread's step, once one thread has called
    entry = []  # what runs the calls, once ``start`` has given it

    def on_pool(a, b, target):
        helpers = threads_now() - 1
        if helpers == 0:
            if not alone:
                alone.append(_here_step(kernel, args, a, b, size))
            return alone[0](a, b, target)
        t = target if native else target.view(kind)
        if entry:
            return entry[0](helpers, *args(kept_a(a), kept_b(b), t))
        call = args(buffer_a(a), buffer_b(b), t)
        kept = start(helpers, call)
        if kept is not None:
            entry.append(kept)

    return on_pool


def _on_own_pool(kernel):
    """How a step's first call runs on the own pool (``runtime.pool``): it makes the runner
    (``parallel.pool_runner``), which every call then takes, ``go(helpers, *call)``."""

    def start(helpers, call):
        go = parallel.pool_runner(kernel, call)
        go(helpers, *call)
        return go

    return start


def _on_layer(kernel):
    """How a step's first calls run on numba's layer: ``launch``, and from the plan's second
    call on the kernel's compiled entry where the layer allows it (``parallel.pool_entry``),
    else ``launch`` still.  (Not on the first: finding the entry costs tens of microseconds,
    and a plan of the general path runs once.)"""
    launches = [0]

    def start(helpers, call):
        parallel.launch(kernel, *call)
        launches[0] += 1
        if launches[0] < 2:  # (several threads may count at once)
            return None
        go = parallel.pool_entry(kernel, *call)
        if go is None:
            return lambda helpers, *call: parallel.launch(kernel, *call)
        return lambda helpers, *call: go(*call)

    return start


def _here_step(kernel, args, a, b, size: int):
    """The step that runs ``kernel``'s serial twin on the calling thread, through the twin's
    compiled entry for read-only operands of these dtypes, the one signature the own pool's
    runner takes too.  The entry reads an operand's data, shape and strides, not its flags,
    and the twin never writes one, so it is called with the operands' flat views, writable
    or not: a read-only operand (an initializer of a model, a broadcast view) compiles no
    twin of its own."""
    kind = kernel_view(a)[0].dtype
    buffer_a, buffer_b = buffer_of(a, pool=False), buffer_of(b, pool=False)
    sample = np.empty(size, kind)  # (a result of ``size`` elements)
    read_only = args(buffer_of(a, pool=True)(a), buffer_of(b, pool=True)(b), sample)
    entry = parallel.here_entry(serial_twin(kernel), *read_only)
    if kind != a.dtype:

        def here(a, b, target):
            entry(*args(buffer_a(a), buffer_b(b), target.view(kind)))

    elif buffer_a is buffer_b is _flat:  # (the common call, in fewer steps)

        def here(a, b, target):
            entry(*args(a.ravel(), b.ravel(), target))

    else:

        def here(a, b, target):
            entry(*args(buffer_a(a), buffer_b(b), target))

    return here


def runs_here(dtype: np.dtype, work: int) -> bool:
    """Whether a product of ``work`` multiply-adds runs on the calling thread: at most
    ``tuning.MATMUL_HERE_MAX`` (64-bit integers: ``MATMUL_HERE_MAX_INT64``), times
    ``MATMUL_HERE_LAYER_FACTOR`` where the pool is numba's threading layer."""
    wide_int = dtype.kind in "iu" and dtype.itemsize == 8
    limit = tuning.MATMUL_HERE_MAX_INT64 if wide_int else tuning.MATMUL_HERE_MAX
    return work <= (limit if own_pool() else limit * tuning.MATMUL_HERE_LAYER_FACTOR)


def own_pool() -> bool:
    """Whether products on more than one thread run on the own pool (``runtime.pool``)."""
    return tuning.OWN_POOL and pool.available()


def pool_buffer(x: np.ndarray) -> np.ndarray:
    """The flat read-only buffer of an operand (``operand``), for the pool's kernels, which
    take every operand so (their SLP builds are made for one signature per dtype)."""
    return flat_buffer(kernel_view(x)[0])[0]


def _flat(x: np.ndarray) -> np.ndarray:
    return x.ravel()  # (of a C-contiguous array: a view, at half ``reshape``'s cost)


def _half_flat(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint16).ravel()


def _half_flat_read_only(x: np.ndarray) -> np.ndarray:
    return contiguous_buffer(x.view(np.uint16))


def buffer_of(x: np.ndarray, pool: bool):
    """The function that gives the flat buffer of an operand of ``x``'s dtype, shape, strides
    and flags: for the pool's kernels, ``pool_buffer``'s; for the calling thread's twins (and
    the own pool's kept runner, ``_step``), a C-contiguous, aligned operand itself, flat,
    writable or read-only as the operand is (a plan's operands always have the same flags, so
    one signature either way).  A C-contiguous, aligned operand costs a ``ravel`` (and the half
    types a view as uint16), a third of ``pool_buffer``'s way; any other layout, what
    ``flat_buffer_of`` worked out for the plan."""
    flags = x.flags
    half = kernel_view(x)[1] != NATIVE
    if not (flags.c_contiguous and flags.aligned):
        flat = flat_buffer_of(kernel_view(x)[0])
        return (lambda x: flat(x.view(np.uint16))) if half else flat
    if pool and flags.writeable:
        return _half_flat_read_only if half else contiguous_buffer
    return _half_flat if half else _flat


def vector_int64() -> bool:
    """Whether 64-bit integer products take the micro-kernel: only with AVX-512DQ's vpmullq
    (without it LLVM builds each 64-bit product from three 32-bit multiplies)."""
    return vector_bits() == 512 and "avx512dq" in cpu_features()


# Register blocks (MR rows, NV vectors of columns) of the micro-kernel by register file.  MR
# accumulators per vector of columns, plus the B vectors and one splat, must fit in the
# vector registers: 32 zmm with AVX-512, 16 ymm with AVX2.  Rows of 8 keep 8 independent FMA
# chains even for one vector of columns, enough to cover the FMA latency.
_WIDE_BLOCK = {512: (8, 2), 256: (6, 2)}
# With AVX-512, strips of four vectors where N has room for them: each row of B is then read as
# 256 contiguous bytes, and A once per 64 columns instead of 32.  The micro-kernel runs at the
# FMA peak either way with its operands in L1; on batches streamed from L3 the wider strip is
# faster.  Six rows on CPUs with two 512-bit FMAs per cycle (Intel's AVX-512 Xeons, AMD's Zen 5):
# 24 accumulators, enough FMAs for each load of B to keep both units busy with B in L2, where
# four rows left Zen 5 at three quarters of its peak.  On Zen 4 (one 512-bit FMA per cycle), four
# rows for float32 (and the 64-bit integers): as fast as six, and M needs no edge block when it
# is a multiple of 4; six for float64.  The measurements: docs/design.md, "The micro-kernel and
# register blocks per CPU".
_WIDER_BLOCK = {512: (6, 4)}
_WIDER_BLOCK_HALVED = (4, 4)  # all but float64


def _wider_block(bits: int, dtype: np.dtype) -> tuple[int, int] | None:
    if bits == 512 and dtype != _F64 and fma512_halved():
        return _WIDER_BLOCK_HALVED
    return _WIDER_BLOCK.get(bits)


@functools.cache
def vector_tile(dtype: np.dtype, n: int) -> tuple[tuple | None, int]:
    """``(tile argument, columns per block)`` of ``matmul_vector`` for ``dtype`` products with
    ``n`` columns, or ``(None, 0)`` where it does not apply: float32/float64, and int64/uint64
    where the CPU multiplies 64-bit lanes (int32 keeps the direct kernel, which wins already)."""
    bits = vector_bits()
    if not bits:
        return None, 0
    if dtype.kind in "iu":
        if dtype.itemsize != 8 or not vector_int64():
            return None, 0
    elif dtype not in (_F32, _F64):
        return None, 0
    lanes = bits // (8 * dtype.itemsize)
    wider = _wider_block(bits, dtype)
    # (the wider strip only where it computes no more columns: the last strip of each kind is
    # shifted left to end at N, and its overlap is computed twice)
    if wider is not None and n >= 4 * lanes and -(-n // (4 * lanes)) * 2 <= -(-n // (2 * lanes)):
        mr, nv = wider
        return tile_shape(mr, nv, lanes), nv * lanes
    if n >= 2 * lanes:
        mr, nv = _WIDE_BLOCK[bits]
        return tile_shape(mr, nv, lanes), nv * lanes
    if n >= lanes:
        return tile_shape(8, 1, lanes), lanes
    if bits == 512 and n >= lanes // 2:  # a 256-bit block for 8 float32 columns
        return tile_shape(8, 1, lanes // 2), lanes // 2
    return None, 0


# Tiny float32/float64 matrices are multiplied whole, in straight-line code compiled for their
# shape (``define_whole``): M and K up to ``tuning.WHOLE_MAX_M`` and ``WHOLE_MAX_K``, N one or two
# vectors, the sums in registers: where the blocked micro-kernel's per-block setup outweighs
# the K steps.

_whole_code: dict[tuple, tuple] = {}  # _whole_address's key -> (address, library)
_serial = itertools.count()


@functools.cache
def whole_function(dtype: np.dtype, m: int, n: int, k: int) -> int | None:
    """The address of the ``define_whole`` function that ``matmul_whole`` calls for ``dtype``
    products of M x K by K x N matrices, or ``None`` where it does not apply: float32/float64,
    M and K small, N one or two vectors of the CPU's width, half or a quarter of it (16 bytes
    at the least).  Compiled on first use
    (tens of milliseconds) and kept for the process."""
    bits = vector_bits()
    if (
        not bits
        or dtype not in (_F32, _F64)
        or m > tuning.WHOLE_MAX_M
        or k > tuning.WHOLE_MAX_K[bits]
    ):
        return None
    registers = 32 if bits == 512 else 16
    widest = bits // (8 * dtype.itemsize)
    # (down to 16-byte vectors: a 4 x 4 float32 product whole, not padded to 8 columns)
    for lanes in (widest, widest // 2, widest // 4):
        nv = n // lanes
        if lanes * dtype.itemsize >= 16 and n % lanes == 0 and nv in (1, 2):
            # rows whose sums, B's vectors of one k and a splat of A fit the registers
            most = (registers - nv - 1) // nv
            if m > most and bits != 256:  # (groups of rows measured on AVX2 only)
                return None
            groups = -(-m // most)
            return _whole_address(dtype, m, k, nv, lanes, -(-m // groups))
    return None


def _whole_address(dtype: np.dtype, m: int, k: int, nv: int, lanes: int, group: int):
    key = (dtype, m, k, nv, lanes, group)
    code = _whole_code.get(key)
    if code is None:
        # (a new name each time: LLVM refuses a second definition of a symbol, and another
        # copy of this module may make the same shape)
        name = f"numba_onnx_ops_whole_{dtype.name}_{m}x{k}x{nv}x{lanes}_{next(_serial)}"
        ft = ir.DoubleType() if dtype == _F64 else ir.FloatType()
        code = native_function(name, lambda mod: define_whole(mod, name, ft, *key[1:]))
        if code is None:
            return None
        code = _whole_code.setdefault(key, code)
    return code[0]


def packed_blocks(itemsize: int, nbatch: int, m: int, n: int, k: int):
    """Block sizes ``(mt, nt, kc, mg)`` of ``matmul_packed`` for one problem."""
    kcmax = 2048 // itemsize  # a k-row of a panel: 2 KiB
    kc = -(-k // -(-k // kcmax))
    kc = -(-kc // 8) * 8
    mg = max(4, (16384 // (kc * itemsize)) // 4 * 4)  # an A group of 16 KiB stays in L1
    nt = 258
    # Rows per task: many, so each packed B block serves many rows, but at most 1024, which
    # bounds the float32 tile of the half types at 1024 x 258 x 4 bytes (1 MiB) per task.
    mt = min(m, 1024)
    tasks = nbatch * -(-n // nt)
    while tasks * -(-m // mt) < 4 and mt > 64:
        mt = -(-mt // 2)
    return mt, nt, kc, mg


def _acc_dtype(dtype: np.dtype) -> np.dtype:
    """Half types accumulate in float32, as the semantics say; every other type in itself, where
    integer wraparound is exactly the result modulo 2**bits."""
    return _F32 if dtype.itemsize == 2 else dtype


_ACC_PROTOS: dict[np.dtype, np.ndarray] = {}


def acc_proto(dtype: np.dtype) -> np.ndarray:
    """An empty array of the accumulator type: kernels allocate their tiles of that dtype."""
    proto = _ACC_PROTOS.get(dtype)
    if proto is None:
        proto = _ACC_PROTOS[dtype] = np.empty(0, _acc_dtype(dtype))
    return proto


# Offset maps of evenly spaced batches, by (origin, count, step): the common batch costs a
# dictionary look-up instead of an arange, a noticeable part of a small call.  Read-only to the
# kernels; bounded in entries and in size.
_RANGES: dict[tuple[int, int, int], np.ndarray] = {}
_RANGES_MAX = 16
_RANGE_MAX_LEN = 1 << 16


def _even_offsets(origin: int, count: int, step: int) -> np.ndarray:
    key = (origin, count, step)
    offsets = _RANGES.get(key)
    if offsets is None:
        offsets = np.arange(origin, origin + count * step, step, dtype=np.int64)
        if count <= _RANGE_MAX_LEN:
            if len(_RANGES) >= _RANGES_MAX:
                _RANGES.clear()
            _RANGES[key] = offsets
    return offsets


def operand(x: np.ndarray, batch: tuple[int, ...], nbatch: int):
    """``(flat read-only buffer, per-matrix offsets, row stride, column stride)`` of a 2-D or
    batched operand, in elements; no data is copied."""
    buf, origin, strides = flat_buffer(x)
    bshape = x.shape[:-2]
    if not batch:
        offsets = np.array([origin], np.int64)
    elif bshape == batch and len(batch) == 1 and strides[0] != 0:
        return buf, _even_offsets(origin, nbatch, strides[0]), strides[-2], strides[-1]
    else:
        offsets = batch_offsets(origin, bshape, strides[:-2], batch)
        if not offsets.flags.writeable:  # (a broadcast view for 2-D operands)
            offsets = offsets.copy()
    # Every call must present the kernels with the same argument types (writable int64
    # offsets, read-only buffers): a new type would compile a second specialization, and
    # for the kernels marked ``slp``, one without the SLP vectorizer.
    return buf, offsets.astype(np.int64, copy=False), strides[-2], strides[-1]
