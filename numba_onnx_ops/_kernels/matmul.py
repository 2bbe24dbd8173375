"""Blocked MatMul kernels over flat element buffers and per-matrix offset maps.

Every operand arrives as a 1-D buffer plus element offsets and strides, so one compiled kernel
per dtype serves every rank, layout (C, Fortran, strided, negative strides) and broadcast batch:
``a_off[b]`` is where batch entry ``b`` of A starts, and ``A[b, i, k]`` is
``a[a_off[b] + i * a_rs + k * a_cs]``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .convert import narrow, widen

# Output tile of MB x NB accumulators (64 x 256 x 8 bytes = 128 KiB at most) and a packed
# B panel of KB x NB: the panel stays in L2 while every row of the tile streams over it.
MB = 64
NB = 256
KB = 256


@njit(parallel=True, cache=True, nogil=True)
def matmul_blocked(a, a_off, a_rs, a_cs, b, b_off, b_rs, b_cs, kind, out, M, N, K, acc_proto):
    """out[b, i, j] = sum_k A[b, i, k] * B[b, k, j], accumulated in ``acc_proto.dtype``.

    ``out`` is C-contiguous (batch, M, N).  Work is split into disjoint (batch, row block,
    column block) tiles; each tile packs its B panel, converted to the accumulator type, into
    a contiguous buffer so the innermost loop is a contiguous, vectorizable AXPY.
    """
    nbatch = out.shape[0]
    mblocks = (M + MB - 1) // MB
    nblocks = (N + NB - 1) // NB
    per_batch = mblocks * nblocks
    for task in prange(nbatch * per_batch):
        bi = task // per_batch
        rest = task - bi * per_batch
        i0 = (rest // nblocks) * MB
        j0 = (rest % nblocks) * NB
        mi = min(MB, M - i0)
        nj = min(NB, N - j0)
        acc = np.zeros((mi, nj), acc_proto.dtype)
        panel = np.empty((min(KB, K), nj), acc_proto.dtype)
        abase = a_off[bi] + i0 * a_rs
        bbase = b_off[bi] + j0 * b_cs
        for k0 in range(0, K, KB):
            kk = min(KB, K - k0)
            for k in range(kk):
                src = bbase + (k0 + k) * b_rs
                for j in range(nj):
                    panel[k, j] = widen(b[src + j * b_cs], kind)
            for i in range(mi):
                arow = abase + i * a_rs + k0 * a_cs
                for k in range(kk):
                    aik = widen(a[arow + k * a_cs], kind)
                    for j in range(nj):
                        acc[i, j] += aik * panel[k, j]
        for i in range(mi):
            for j in range(nj):
                out[bi, i0 + i, j0 + j] = narrow(acc[i, j], kind, out)
