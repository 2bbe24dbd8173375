"""How MatMul picks the code that runs a product: the one place that decides.

For validated operands (``decisions.check``), ``run``:

- float32/float64 products whose layout numpy's BLAS takes (``blas.blasable``), except long
  batches of small matrices: ``numpy.matmul`` (OpenBLAS).  OpenBLAS has no launch cost and
  packs its operands, so single products stay with it; numpy calls it once per matrix of a
  batch, on one thread for small ones, so such batches go to the own vector micro-kernel.
- large bfloat16 products on CPUs whose AVX512_BF16 pair dot products outrun float32 FMAs
  (``bf16_pairs``), unless an operand could make the instruction flush a subnormal.
- other large float16/bfloat16 products: numpy's sgemm on bounded float32 panels
  (``half_panels``).
- everything else (integers, smaller half products, long batches of small float matrices,
  layouts BLAS cannot take): the own kernels (``own`` picks one by shape).

The sizes where one path overtakes another are in ``tuning``.  ``common_call`` serves the
common calls (plain 2-D, matrix-vector, one batch axis of the same length on both, no ``out``
or ``opset``) with the same decisions in a few attribute reads.
"""

from __future__ import annotations

import math

import numpy as np

from ... import tuning
from ...core.dtypes import is_bfloat16
from ...core.versions import MATMUL_ALLOWED, resolve_version
from ...runtime import memory
from . import bf16_pairs, blas, half_panels, own

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_NEWEST_TYPES = MATMUL_ALLOWED[resolve_version("MatMul")]


def common_call(A: np.ndarray, B: np.ndarray):
    """``A @ B`` for plain ndarrays of one dtype in the common layouts, every check of the
    general path made in a few attribute reads; ``None`` when the call is not of that kind
    (the general path then decides, and raises what it raises)."""
    dt = A.dtype
    # ``is``: numpy's builtin dtypes are singletons, and a dtype that is not one (say, with
    # metadata) just takes the general path; ``==`` on dtypes costs more than the test.  The
    # dtype test also rules out non-native byte order.
    if (dt is _F32 or dt is _F64) and B.dtype is dt and A.ndim + B.ndim <= 6:
        if A.ndim == 3 and B.ndim == 3:
            # One batch axis on both, of the same length, K > 0.
            nb, m, k = A.shape
            if nb == B.shape[0] and k == B.shape[1] and k:
                n = B.shape[2]
                target = memory.empty((nb, m, n), dt)
                if target.size:
                    if blas_wins(dt, nb, m, n, k, A, B):
                        blas.matmul(A, B, out=target)
                    else:
                        own.run(A, B, (nb,), m, n, k, target)
                return target
        elif A.ndim == 2 and B.ndim == 2:
            if (
                A.shape[1] == B.shape[0]
                and (A.flags.c_contiguous or blas.blasable(A))  # (the flag is the cheaper test)
                and (B.flags.c_contiguous or blas.blasable(B))
            ):
                return blas.matmul(A, B)
        elif A.ndim + B.ndim == 3 and A.shape[-1] == B.shape[0]:
            mat, vec = (A, B) if A.ndim == 2 else (B, A)
            if vec.strides[0] == vec.itemsize and blas.blasable(mat):
                return blas.matmul(A, B)  # matrix-vector or vector-matrix: gemv
    elif B.dtype == dt and A.ndim == B.ndim and (A.ndim == 2 or A.ndim == 3):
        # The other dtypes, 2-D or one batch axis of the same length on both, no size 0.
        m, k = A.shape[-2:]
        n = B.shape[-1]
        batch = A.shape[:-2]
        if (
            k == B.shape[-2]
            and m * n * k
            and batch == B.shape[:-2]
            and (not batch or batch[0])
            and dt.isnative
            and dt in _NEWEST_TYPES
            and dt != _F32  # (float dtypes that are not numpy's own objects: BLAS
            and dt != _F64  # may take them, so the general path)
        ):
            target = memory.empty(batch + (m, n), dt)
            _run_own_paths(A, B, batch, m, n, k, target)
            return target
    return None


def run(a, b, a2, b2, batch, m, n, k, target) -> None:
    """``target[...] = a @ b`` for the verdict of ``decisions.check`` (the operands ``a``,
    ``b``, their 2-D promotions ``a2``, ``b2``, the batch shape and the matrix sizes) into a
    C-contiguous ``target`` with at least one element."""
    if k == 0:
        target[...] = 0
    elif a.dtype in (_F32, _F64) and blas_wins(a.dtype, math.prod(batch), m, n, k, a2, b2):
        blas.matmul(a, b, out=target)
    else:
        _run_own_paths(a2, b2, batch, m, n, k, target)


def _run_own_paths(a2, b2, batch, m, n, k, target) -> None:
    """``target[...] = a2 @ b2`` for 2-D-promoted operands that numpy's BLAS does not take as
    they are: half types on pairs or panels where large, else the own kernels."""
    dt = a2.dtype
    if is_bfloat16(dt) and bf16_pairs.pairs_win(m, n, k):
        bf16_pairs.run_bf16_pairs(a2, b2, batch, m, n, k, target)
    elif dt.itemsize == 2 and half_blas_wins(m, n, k):
        half_panels.run_half_blas(a2, b2, batch, m, n, k, target)
    else:
        own.run(a2, b2, batch, m, n, k, target)


def blas_wins(dtype: np.dtype, nbatch: int, m: int, n: int, k: int, a2, b2) -> bool:
    """Whether numpy's BLAS beats the own kernels on a validated float32/float64 product of
    2-D-promoted operands (``nbatch`` matrices; 1 without batch dimensions)."""
    if not (blas.blasable(a2) and blas.blasable(b2)):
        return False
    mnk = m * n * k
    if nbatch >= tuning.OWN_MIN_BATCH[dtype] and mnk <= tuning.OWN_MAX_MNK[dtype]:
        return False
    if nbatch > 1 and b2.strides[-1] == b2.itemsize and own.vector_tile(dtype, n)[0] is not None:
        bits = own.vector_bits()
        return nbatch * mnk < tuning.VECTOR_MIN_WORK[bits] or mnk > tuning.VECTOR_MAX_MNK[bits]
    return True


def half_blas_wins(m: int, n: int, k: int) -> bool:
    """Whether a float16/bfloat16 product is large enough for sgemm on float32 panels.
    Vectors stay on the own kernels, which widen halves in registers."""
    return m > 1 and n > 1 and m * n * k >= tuning.HALF_BLAS_MIN
