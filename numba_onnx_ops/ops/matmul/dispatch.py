"""How MatMul picks the code that runs a product: the one place that decides.

For validated operands (``decisions.check``), ``run``:

- float32/float64 products on a CPU with AVX2 and FMA: the own kernels (``own.plan``) of one
  accumulation order, each element a chain of fused multiply-adds over k (matrix-vector
  products: a dot product per row), on numba's threads.  Measured beside OpenBLAS, MLAS and
  MKL (``bench --cases gemm``), and their bits depend only on the values: not on the thread
  count, the batch position, the rows computed with them or the operands' memory order.
- on other CPUs, float32/float64 products whose layout numpy's BLAS takes
  (``blas.blasable``), except long batches of small matrices: ``numpy.matmul`` (OpenBLAS).
- bfloat16 products from ``tuning.PAIRS_MIN_MNK`` multiply-adds per matrix on CPUs whose
  AVX512_BF16 pair dot products outrun float32 FMAs (``bf16_pairs``); a matrix whose operands
  could make the instruction flush a subnormal is done again on the panels.
- other large float16/bfloat16 products: bounded float32 panels on the float micro-kernel
  (``half_panels``), in the float products' order.
- everything else (integers, smaller half products, long batches of small float matrices,
  layouts BLAS cannot take): the own kernels (``own`` picks one by shape).

The sizes where one path overtakes another are in ``tuning``.  ``make`` turns a call's
decisions into a plan the entry point keeps per call key (``api.matmul``, ``core.plans``).
"""

from __future__ import annotations

import math

import numpy as np

from ... import tuning
from ...core.checks import finish, prepare_out
from ...core.dtypes import is_bfloat16
from ...runtime import memory
from . import bf16_pairs, blas, decisions, half_panels, own

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def make(A: np.ndarray, B: np.ndarray, opset):
    """The plan of a call of two ndarrays: ``decisions.check`` (which raises what ``matmul``
    documents), then the work left for operands of this call's key, as a function
    ``plan(A, B)``.  What a plan depends on, which the key must hold: the opset, the operands'
    dtypes, shapes, strides (BLAS's layouts, the kernels' unit strides and batch offsets) and
    flags (alignment, writability: the kernels' argument types)."""
    _, a, b, a2, b2, batch, (m, k, n), shape = decisions.check(A, B, opset)
    dtype = a.dtype
    if a is not A or b is not B:
        # an operand converted (its byte order): the checks convert it on every call
        return lambda A, B: run_checked(A, B, opset)
    size = math.prod(shape)
    if size == 0:
        return lambda A, B: memory.empty(shape, dtype)
    if k == 0:
        return lambda A, B: np.zeros(shape, dtype)
    if dtype in (_F32, _F64) and blas_wins(dtype, math.prod(batch), m, n, k, a2, b2):
        if shape and size * dtype.itemsize < tuning.POOL_MIN_BYTES:
            # (numpy allocates; with no result shape, numpy's is a scalar)
            return blas.matmul
        return lambda A, B: blas.matmul(A, B, out=memory.empty(shape, dtype))
    step = _own_paths(a2, b2, batch, m, n, k)
    # (numpy's own allocation below the pool's sizes: ``memory.empty`` would decide that again)
    empty = np.empty if size * dtype.itemsize < tuning.POOL_MIN_BYTES else memory.empty
    if a.ndim > 1 and b.ndim > 1:

        def own(A, B):
            target = empty(shape, dtype)
            step(A, B, target)
            return target

    else:  # 1-D promotion: a row, a column
        row, column = a.ndim == 1, b.ndim == 1

        def own(A, B):
            target = empty(shape, dtype)
            step(A.reshape(1, -1) if row else A, B.reshape(-1, 1) if column else B, target)
            return target

    return own


def make_into(A: np.ndarray, B: np.ndarray, opset):
    """The plan of a call of two ndarrays with an ndarray ``out``: a function
    ``plan(A, B, out)`` for operands of the key ``make`` documents (``out``'s properties are
    not part of it: the plan checks ``out`` on every call, as ``checks.prepare_out`` does).
    The own kernels write into ``out`` itself where it is C-contiguous, aligned and apart from
    the operands, else into a fresh array copied into it; the other paths (BLAS, empty
    results, converted operands) take the general path's ``run``."""
    label, a, b, a2, b2, batch, (m, k, n), shape = decisions.check(A, B, opset)
    dtype = a.dtype
    if (
        a is not A
        or b is not B
        or k == 0
        or math.prod(shape) == 0
        or (dtype in (_F32, _F64) and blas_wins(dtype, math.prod(batch), m, n, k, a2, b2))
    ):
        return lambda A, B, out: run_checked(A, B, opset, out)
    step = _own_paths(a2, b2, batch, m, n, k)
    row, column = a.ndim == 1, b.ndim == 1

    def into(A, B, out):
        result, target = prepare_out(label, out, shape, dtype, (A, B))
        if not target.flags.aligned:  # (the kernels' types are of aligned arrays)
            target = memory.empty(shape, dtype)
        step(A.reshape(1, -1) if row else A, B.reshape(-1, 1) if column else B, target)
        return finish(result, target)

    return into


def run_checked(A, B, opset, out=None):
    """The general path of a call: ``decisions.check`` (which raises what ``matmul`` documents
    and converts operands where needed), ``out`` checked or the result allocated
    (``checks.prepare_out``), the product, and its copy into ``out`` where the kernels wrote
    elsewhere.  Every decision is made again: for calls no plan takes, and for plans of calls
    whose operands are converted on every call."""
    label, a, b, a2, b2, batch, (m, k, n), shape = decisions.check(A, B, opset)
    result, target = prepare_out(label, out, shape, a.dtype, (a, b))
    if target.size:
        run(a, b, a2, b2, batch, m, n, k, target)
    return finish(result, target)


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
    they are."""
    _own_paths(a2, b2, batch, m, n, k)(a2, b2, target)


def _own_paths(a2, b2, batch, m, n, k):
    """The step (``step(a2, b2, target)``) of a product of 2-D-promoted operands that numpy's
    BLAS does not take as they are: half types on pairs or panels where large, widened whole
    where mid-size (alone or in batches) and in batches of smaller bfloat16 products, else the
    own kernels (``own.plan``)."""
    dt = a2.dtype
    if is_bfloat16(dt) and bf16_pairs.pairs_win(m, n, k):
        return bf16_pairs.plan(a2, b2, batch, m, n, k)
    if dt.itemsize == 2 and half_panels_win(m, n, k):
        return lambda a2, b2, target: half_panels.run_half_panels(a2, b2, batch, m, n, k, target)
    if dt.itemsize == 2 and half_panels.widened_takes(a2, b2, batch, m, n, k):
        return half_panels.widened_plan(a2, b2, batch, m, n, k)
    return own.plan(a2, b2, batch, m, n, k)


def blas_wins(dtype: np.dtype, nbatch: int, m: int, n: int, k: int, a2, b2) -> bool:
    """Whether numpy's BLAS takes a validated float32/float64 product of 2-D-promoted operands
    (``nbatch`` matrices; 1 without batch dimensions): never where the own kernels take float
    products, else where it is faster than the plain own kernels."""
    if own.takes_floats(dtype) or not (blas.blasable(a2) and blas.blasable(b2)):
        return False
    return nbatch < tuning.OWN_MIN_BATCH[dtype] or m * n * k > tuning.OWN_MAX_MNK[dtype]


def half_panels_win(m: int, n: int, k: int) -> bool:
    """Whether a float16/bfloat16 product is large enough for float32 panels.
    Vectors stay on the own kernels, which widen halves in registers."""
    return m > 1 and n > 1 and m * n * k >= tuning.HALF_PANELS_MIN
