"""Where numpy's BLAS beats the own MatMul kernels: the crossovers, by shape and dtype.

numpy.matmul hands a float32/float64 product to OpenBLAS when the layout allows it.  OpenBLAS
has no launch cost (a parallel launch of the own kernels and their front cost about 15 us) and
packs its operands, so single products stay with it.  But numpy calls it once per matrix of a
batch, and for small matrices OpenBLAS runs each call on one thread: batches go to the own
vector micro-kernel, which splits the batch over the threads at about OpenBLAS's speed per
core, once there is enough work to pay for the launch.  The crossovers were measured the way the
peer comparison times (interleaved, settled samples); the figures are kept with the benchmarks
that measure them (``benchmarks/matmul.py``).
"""

from __future__ import annotations

import numpy as np

from .own import vector_bits, vector_tile

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

# Without the vector micro-kernel (no AVX2+FMA, or B's columns not unit-stride), the own
# kernels take a float batch of at least this many matrices of at most this many multiply-adds
# each; float64's vectors hold half as many lanes, so it crosses over later.
OWN_MIN_BATCH = {_F32: 1024, _F64: 4096}
OWN_MAX_MNK = {_F32: 48**3, _F64: 16**3}

# The vector micro-kernel takes batches of at least this many multiply-adds in all (its launch
# and front, about 15 us, are paid back) of matrices of at most VECTOR_MAX_MNK multiply-adds
# (past which OpenBLAS, packing and running each product on every thread, is as fast or
# faster).  By register width, since OpenBLAS's kernels differ more than ours between the two:
# its AVX2 (Haswell) kernels lose more per call on small matrices, so the own launch pays back
# sooner there, and gain on large ones.  On AVX-512 (Zen 4, 2 vCPUs), samples as the peer
# comparison takes them (a 50 ms pause, then 5 ms of calls; medians of 11, numpy's time / the
# own kernel's): 16 x 64^3 1.20, 128 x 64^3 1.62, 64 x 128x64x128 1.50, 4 x 128^3 0.93,
# 16 x 128^3 1.29, 2 x 256^3 1.09, 4 x 256^3 1.63, 8 x 256^3 1.41, 16 x 256^3 0.98,
# 8 x 8 broadcast 256^3 1.11, 2 x 384^3 0.93, 4 x 384^3 1.19; single runs vary by 30%.  (Before
# the caller yielded to a pool thread queued behind it, the second core joined the own kernel
# only milliseconds after a pause, and OpenBLAS kept everything past 64^3.)
VECTOR_MIN_WORK = {512: 1 << 21, 256: 1 << 20}
VECTOR_MAX_MNK = {512: 256**3, 256: 128**3}

# float16/bfloat16 products of at least this many multiply-adds per matrix go to sgemm on
# float32 panels; below it the panel steps per matrix cost more than they save.
HALF_BLAS_MIN = 192**3


def blas_wins(dtype: np.dtype, nbatch: int, m: int, n: int, k: int, a2, b2) -> bool:
    """Whether numpy's BLAS beats the own kernels on a validated float32/float64 product of
    2-D-promoted operands (``nbatch`` matrices; 1 without batch dimensions)."""
    if not (blasable(a2) and blasable(b2)):
        return False
    mnk = m * n * k
    if nbatch >= OWN_MIN_BATCH[dtype] and mnk <= OWN_MAX_MNK[dtype]:
        return False
    if nbatch > 1 and b2.strides[-1] == b2.itemsize and vector_tile(dtype, n)[0] is not None:
        bits = vector_bits()
        return nbatch * mnk < VECTOR_MIN_WORK[bits] or mnk > VECTOR_MAX_MNK[bits]
    return True


def blasable(x: np.ndarray) -> bool:
    """Whether numpy.matmul hands these matrices to BLAS rather than to its plain loop: one
    axis of unit stride, the other a whole number of elements at least as long as the first
    axis (numpy's ``is_blasable2d``, either way round); a vector needs a positive stride."""
    item = x.itemsize
    r, c = x.shape[-2:]
    s0, s1 = x.strides[-2:]
    if r == 1 or c == 1:
        s = s1 if r == 1 else s0
        return c == r == 1 or (s > 0 and s % item == 0)
    if s1 == item:
        return s0 % item == 0 and s0 >= c * item
    return s0 == item and s1 % item == 0 and s1 >= r * item


def half_blas_wins(m: int, n: int, k: int) -> bool:
    """Whether a float16/bfloat16 product is large enough for sgemm on float32 panels.
    Vectors stay on the own kernels, which widen halves in registers."""
    return m > 1 and n > 1 and m * n * k >= HALF_BLAS_MIN
