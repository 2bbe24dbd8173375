"""bfloat16 products on AVX512_BF16's pair dot products (``vdpbf16ps``), rounded once.

One ``vdpbf16ps`` multiplies 32 pairs of bfloat16 and adds them into 16 float32 sums: twice
the multiply-adds of a float32 FMA, so past sgemm on widened panels.  Per lane it computes
``(acc + a_hi * b_hi) + a_lo * b_lo`` for the elements k = 2p + 1 and k = 2p: each product is
exact in float32 (8-bit significands) and each sum is rounded to nearest, which is exactly two
float32 FMAs, so the result is "accumulate in float32, round once" with the terms in the order
1, 0, 3, 2, ...  Two departures from IEEE arithmetic are kept out:

- subnormal inputs read as zero: no input may be subnormal;
- subnormal sums are flushed to zero: every nonzero product must be at least 2**-110 in
  magnitude.  Then each product, a bfloat16 significand (8 bits) times a power of two, is a
  multiple of 2**-124, so is every float32 partial sum (rounding a multiple of 2**-124 to
  float32 leaves a multiple of 2**-124), and a nonzero one is at least 2**-124: normal.

Both conditions come down to the smallest exponent field among the nonzero elements of A and
of B (``ea``, ``eb``): both at least 1 and ``ea + eb - 254 >= -110``.  Packing the operands
into pairs along K reads every element anyway and finds them; a product whose inputs fail the
check goes to the float32 panels instead (``half_panels``).  The float32 sums are rounded to
bfloat16 as they are stored (``vcvtneps2bf16``: to nearest even; it too would flush a
subnormal, which the check rules out).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ... import tuning
from ...core.dtypes import kernel_view
from ...runtime import parallel
from ...runtime.cpu import amd_zen, cpu_features, vector_bits
from ...runtime.jit import serial_twin
from ...runtime.numba_private import threads_now
from . import kernels as _k
from . import own
from .half_panels import run_half_panels
from .microkernel import tile_shape

_U32 = np.dtype(np.uint32)
# Smallest exponent-field sum (ea + eb) of two nonzero inputs whose product is >= 2**-110.
EXPONENT_SUM_MIN = 254 - 110
# An exponent field that, as the smallest of both operands, passes ``inputs_safe`` alone.
_SAFE_FLOOR = -(-EXPONENT_SUM_MIN // 2)
_TASKS_PER_THREAD = 4  # work items of a launch per thread, at the least, where rows allow


def pairs_supported() -> bool:
    """Whether numba compiles for a CPU with AVX512_BF16's pair dot products."""
    return vector_bits() == 512 and "avx512bf16" in cpu_features()


@functools.cache
def pairs_fast() -> bool:
    """Whether the pair dot products outrun float32 FMAs on this CPU: AMD's Zen cores.

    On AMD's Zen 4 a ``vdpbf16ps`` issues as often as a ``vfmadd231ps`` and does twice its
    multiply-adds; on the Intel Xeon with AVX512_BF16 measured it issues far less often, and
    the pairs ran slower than the float32 panels.  Other CPUs keep the panels until measured (the
    measurements: docs/design.md, "Half types: sgemm panels and bfloat16 pairs")."""
    return pairs_supported() and amd_zen()


def pairs_win(m: int, n: int, k: int) -> bool:
    """Whether a bfloat16 product runs on the pair dot products: a CPU where they are fast (as
    numba compiles for it) and enough work per matrix."""
    return n >= tuning.PAIRS_MIN_N and m * n * k >= tuning.PAIRS_MIN_MNK and pairs_fast()


def inputs_safe(emin: np.ndarray, m: int) -> np.ndarray:
    """Per matrix, whether ``pack_bf16_pairs``'s exponent floors (``emin``: a row per matrix,
    A's rows first) rule out subnormal inputs and subnormal sums (module docstring)."""
    ea = emin[:, :m].min(axis=1).astype(np.int64)
    eb = emin[:, m:].min(axis=1).astype(np.int64)
    return (ea >= 1) & (eb >= 1) & (ea + eb >= EXPONENT_SUM_MIN)


def plan(a2, b2, batch, m, n, k):
    """The step ``step(a2, b2, target)`` of bfloat16 products of operands of ``a2``'s and
    ``b2``'s shapes, strides and flags (validated, 2-D-promoted, batch dimensions ``batch``)
    into a C-contiguous ``target``; ``pairs_win(m, n, k)`` must hold.

    Two launches for the whole batch: pack every matrix's A and B into pairs along K (as much
    memory as the operands), then the micro-kernel sums each block of C in float32 registers
    and stores it rounded once to bfloat16.  Matrices whose inputs fail ``inputs_safe`` are
    then done again on the float32 panels of ``half_panels``.  Everything but the memory is
    decided here, once: the register block, the operands' offsets per matrix, and per thread
    count the row blocks of the launch.  Small products pack (at most
    ``tuning.PAIRS_PACK_HERE_MAX`` elements) and multiply (at most ``tuning.PAIRS_HERE_MAX``
    multiply-adds) on the calling thread, which saves the launches.
    """
    nbatch = math.prod(batch)
    kp = (k + 1) // 2
    mr, nv = register_block(n)
    tile, nr = tile_shape(mr, nv, 16), 16 * nv
    _, a_offs, ars, acs = own.operand(kernel_view(a2)[0], batch, nbatch)
    _, b_offs, brs, bcs = own.operand(kernel_view(b2)[0], batch, nbatch)
    buffer_a, buffer_b = own.buffer_of(a2, pool=True), own.buffer_of(b2, pool=True)
    pack_here = nbatch * (m + n) * k <= tuning.PAIRS_PACK_HERE_MAX
    multiply_here = nbatch * m * n * k <= tuning.PAIRS_HERE_MAX
    launches = {}  # thread count -> [(first row, rows per entry, A's, B's offsets, tasks)]

    def launches_for(threads):
        found = launches.get(threads)
        if found is None:
            found = launches[threads] = []
            strips = -(-n // nr)
            for r0, rb, count in _row_blocks(m, nbatch * strips, mr, threads):
                # entries (matrix, block of rb rows): C's blocks follow each other in the result
                # only where the blocks fill every matrix's rows (count * rb == m)
                per = [None] if count * rb == m else range(nbatch)
                for bi in per:
                    b_list = range(nbatch) if bi is None else [bi]
                    a_off = np.array([(b_ * m + r0 + rb * c) * kp for b_ in b_list
                                      for c in range(count)], np.int64)  # fmt: skip
                    b_off = np.array([b_ * kp * n for b_ in b_list for _ in range(count)], np.int64)
                    tasks = min(len(a_off) * strips, 2 * _TASKS_PER_THREAD * threads)
                    found.append((r0 if bi is None else bi * m + r0, rb, a_off, b_off, tasks))
        return found

    # (the calling thread's twins, or the pool's kernels, chosen now; ``parallel``'s doors are
    # looked up at each call)
    pack = serial_twin(_k.pack_bf16_pairs) if pack_here else _k.pack_bf16_pairs
    kernel = serial_twin(_k.matmul_vector) if multiply_here else _k.matmul_vector

    def step(a2, b2, target):
        ap = np.empty((nbatch, m, kp), _U32)
        bp = np.empty((nbatch, kp, n), _U32)
        emin = np.empty((nbatch, m + kp), _U32)
        args = (buffer_a(a2), a_offs, ars, acs, ap, buffer_b(b2), b_offs, brs, bcs, bp, k, emin)
        (parallel.here if pack_here else parallel.launch)(pack, *args)
        flat_a, flat_b = ap.reshape(-1), bp.reshape(-1)
        out = target.view(np.uint16).reshape(-1)
        threads = 1 if multiply_here else threads_now()
        for first, rb, a_off, b_off, tasks in launches_for(threads):
            c3 = out[first * n : first * n + len(a_off) * rb * n].reshape(-1, rb, n)
            (parallel.here if multiply_here else parallel.launch)(
                kernel, flat_a, a_off, kp, 1, flat_b, b_off, n, 1, c3, rb, n, kp, False, tasks,
                tile, 0,
            )  # fmt: skip
        if int(emin.min()) < _SAFE_FLOOR:  # (else every matrix passes: one reduction)
            for bi in np.flatnonzero(~inputs_safe(emin, m)).tolist():
                _run_on_panels(a2, b2, batch, bi, m, n, k, target)

    return step


def _run_on_panels(a2, b2, batch, bi, m, n, k, target) -> None:
    """Matrix ``bi`` of the batch on the float32 panels (its inputs fail ``inputs_safe``)."""
    index = np.unravel_index(bi, batch) if batch else ()
    a3 = np.broadcast_to(a2, batch + a2.shape[-2:])[index]
    b3 = np.broadcast_to(b2, batch + b2.shape[-2:])[index]
    run_half_panels(a3, b3, (), m, n, k, target.reshape(batch + (m, n))[index])


def register_block(n: int) -> tuple[int, int]:
    """``(rows, vectors of 16 columns)`` of the micro-kernel's register block for products of
    ``n`` columns.  Six rows by four vectors where N has room for them and that computes no
    more columns (the last strip is shifted left to end at N, its overlap computed twice):
    each B vector loaded serves six rows, and 1024^3 measured 5% faster than eight rows by
    two vectors (docs/design.md, "Half types: sgemm panels and bfloat16 pairs")."""
    if n >= 64 and -(-n // 64) * 2 <= -(-n // 32):
        return 6, 4
    if n >= 32:
        return 8, 2
    return 8, 1  # (where a caller lowers tuning.PAIRS_MIN_N)


def _row_blocks(rows: int, items: int, mr: int, threads: int) -> list[tuple[int, int, int]]:
    """``(first row, rows per block, blocks)`` covering the ``rows`` rows of each matrix: one
    block when the column strips of the batch (``items``) alone give each of ``threads``
    threads several work items; else the rows split evenly where they divide, or blocks of a
    multiple of the register block's ``mr`` rows, the remainder as one more block."""
    want = _TASKS_PER_THREAD * threads
    if items >= want or rows <= mr:
        return [(0, rows, 1)]
    count = min(-(-want // items), rows // mr)  # blocks per matrix, of at least mr rows
    if rows % count == 0:
        return [(0, rows // count, count)]
    per = -(-rows // count)
    rb = max(mr, -(-per // mr) * mr)
    count = rows // rb
    blocks = [(0, rb, count)]
    if rows > count * rb:
        blocks.append((count * rb, rows - count * rb, 1))
    return blocks
