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

import numba
import numpy as np

from ... import tuning
from ...core.broadcast import flat_buffer
from ...core.dtypes import kernel_view
from ...runtime import parallel
from ...runtime.cpu import amd_zen, cpu_features, vector_bits
from . import kernels as _k
from .half_panels import run_half_panels
from .microkernel import tile_shape

_U32 = np.dtype(np.uint32)
# Smallest exponent-field sum (ea + eb) of two nonzero inputs whose product is >= 2**-110.
EXPONENT_SUM_MIN = 254 - 110
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


def inputs_safe(emin: np.ndarray, m: int) -> bool:
    """Whether ``pack_bf16_pairs``'s exponent floors (A's rows first) rule out subnormal inputs
    and subnormal sums (module docstring)."""
    ea = int(emin[:m].min())
    eb = int(emin[m:].min())
    return ea >= 1 and eb >= 1 and ea + eb >= EXPONENT_SUM_MIN


def run_bf16_pairs(a2, b2, batch, m, n, k, target) -> None:
    """``target[...] = a2 @ b2`` for validated 2-D-promoted bfloat16 operands (batch dimensions
    ``batch``) into a C-contiguous ``target``; ``pairs_win(m, n, k)`` must hold.

    Per matrix: pack A and B into pairs along K (as much memory as the operands), then the
    micro-kernel sums each block of C in float32 registers and stores it rounded once to
    bfloat16.  Matrices whose inputs fail ``inputs_safe`` take the float32 panels of
    ``half_panels``.
    """
    kp = (k + 1) // 2
    ap = np.empty((m, kp), _U32)
    bp = np.empty((kp, n), _U32)
    emin = np.empty(m + kp, _U32)
    mr, nv = register_block(n)
    tile, nr = tile_shape(mr, nv, 16), 16 * nv
    out = kernel_view(target)[0].reshape(-1)
    flat_a, flat_b = ap.reshape(-1), bp.reshape(-1)
    a3 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b3 = np.broadcast_to(b2, batch + b2.shape[-2:])
    blocks = _row_blocks(m, -(-n // nr), mr)
    for bi, index in enumerate(np.ndindex(*batch)):
        abuf, aorg, (ars, acs) = flat_buffer(kernel_view(a3[index])[0])
        bbuf, borg, (brs, bcs) = flat_buffer(kernel_view(b3[index])[0])
        parallel.launch(
            _k.pack_bf16_pairs, abuf, aorg, ars, acs, ap, bbuf, borg, brs, bcs, bp, k, emin
        )
        if not inputs_safe(emin, m):
            run_half_panels(a3[index], b3[index], (), m, n, k, target[index])
            continue
        for r0, rb, count in blocks:
            # ``count`` blocks of ``rb`` rows, each a batch entry of the micro-kernel's launch:
            # work items are (entry, strip of columns), so narrow products still give every
            # thread work.
            first = bi * m * n + r0 * n
            c3 = out[first : first + count * rb * n].reshape(count, rb, n)
            a_off = (r0 + rb * np.arange(count, dtype=np.int64)) * kp
            b_off = np.zeros(count, np.int64)
            chunks = min(count * -(-n // nr), 2 * _TASKS_PER_THREAD * numba.get_num_threads())
            parallel.launch(_k.matmul_vector, flat_a, a_off, kp, 1, flat_b, b_off, n, c3, rb, n, kp,
                   False, chunks, tile)  # fmt: skip


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


def _row_blocks(rows: int, strips: int, mr: int) -> list[tuple[int, int, int]]:
    """``(first row, rows per block, blocks)`` covering ``rows`` rows: one block when the
    column strips alone give each thread several work items, else blocks of a multiple of
    the register block's ``mr`` rows, the remainder as one more block."""
    want = _TASKS_PER_THREAD * numba.get_num_threads()
    if strips >= want or rows <= mr:
        return [(0, rows, 1)]
    per = -(-rows // -(-want // strips))  # rows per block for about ``want`` items
    rb = max(mr, -(-per // mr) * mr)
    count = rows // rb
    blocks = [(0, rb, count)]
    if rows > count * rb:
        blocks.append((count * rb, rows - count * rb, 1))
    return blocks
