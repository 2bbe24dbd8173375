"""MatMul front layer: version and dtype checks, numpy.matmul's shape rules, dispatch.

Dispatch, after every check:

- float32/float64 products whose layout numpy's BLAS takes, except long batches of small
  matrices: ``numpy.matmul`` (OpenBLAS) on the validated arrays; plain 2-D, matrix-vector and
  same-length 3-D batch calls take a short path.  The crossovers live in ``_matmul_dispatch``.
- large bfloat16 products on CPUs whose AVX512_BF16 pair dot products outrun float32 FMAs
  (``_matmul_bf16.pairs_fast``): the pairs on the vector micro-kernel (``_matmul_bf16``),
  unless an operand could make the instruction flush a subnormal.
- other large float16/bfloat16 products: numpy's sgemm on bounded float32 panels
  (``_matmul_half``).
- everything else (integers, smaller half products, long batches of small float matrices,
  layouts BLAS cannot take) runs on the own kernels (``_matmul_own`` picks one by shape).

Plain 2-D and same-length 3-D calls of the other dtypes skip the general checks too, and go
to the same dispatch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ...core.broadcast import broadcast_shape
from ...core.checks import check_dtype, dask_operand, finish, prepare_out
from ...core.dtypes import as_input, is_bfloat16
from ...core.versions import MATMUL_ALLOWED, resolve_version
from ...runtime import memory as _alloc
from .bf16_pairs import pairs_win, run_bf16_pairs
from .dispatch import blas_wins, blasable, half_blas_wins
from .half_panels import run_half_blas
from .own import run

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_NEWEST_TYPES = MATMUL_ALLOWED[resolve_version("MatMul")]
_np_matmul = np.matmul  # the BLAS path (a module global, so tests can watch it)


def matmul(
    A: ArrayLike, B: ArrayLike, *, opset: int | None = None, out: np.ndarray | None = None
) -> np.ndarray:
    """Matrix product of ``A`` and ``B`` as ONNX MatMul defines it (numpy.matmul's rules).

    Parameters
    ----------
    A, B : array_like
        Operands of the same dtype, of rank >= 1.  A 1-D ``A`` is a row vector and a 1-D ``B``
        a column vector; those dimensions are removed from the result.  Leading (batch)
        dimensions broadcast numpy-style.  Any layout is read in place.  If either is a
        ``dask.array.Array``, the result is a lazy dask array with the same semantics
        (checks made at the call; ``out`` is refused; see ``numba_onnx_ops._dask.matmul`` for
        the chunking).
    opset : int, optional
        Default-domain opset of the model; selects MatMul-1 (float16/32/64), MatMul-9 (adds
        int32, int64, uint32, uint64) or MatMul-13 (adds bfloat16).  ``None``: the newest.
    out : numpy.ndarray, optional
        Array of the result's exact shape and dtype to fill and return.

    Returns
    -------
    numpy.ndarray or dask.array.Array
        The product, of the operands' dtype.  Integers wrap modulo 2**bits; float16 and
        bfloat16 accumulate in float32 and round once.

    Raises
    ------
    TypeError
        A dtype the version does not allow, ``A`` and ``B`` of different dtypes, or ``out`` of
        the wrong dtype.
    ValueError
        A bad ``opset``, a rank-0 operand, inner dimensions or batch shapes that do not match,
        or ``out`` of the wrong shape.
    """
    if out is None and opset is None and type(A) is np.ndarray and type(B) is np.ndarray:
        # The common call, plain 2-D float32/float64 arrays: every check of the general path
        # in a few attribute reads, then numpy's BLAS (the dtype test also rules out
        # non-native byte order).  A 4x4 product costs about numpy's own call.
        # ``is``: numpy's builtin dtypes are singletons, and a dtype that is not one (say, with
        # metadata) just takes the general path; ``==`` on dtypes costs 0.1 us a test.
        dt = A.dtype
        if (dt is _F32 or dt is _F64) and B.dtype is dt and A.ndim + B.ndim <= 6:
            if A.ndim == 3 and B.ndim == 3:
                # One batch axis on both, of the same length, K > 0: the general path's
                # float dispatch, result buffer included, without its checks (4-7 us of
                # Python: 4 of a 2 x 16^3 product's 6 us, 7 of a 4096 x 8^3 one's 52).
                nb, m, k = A.shape
                if nb == B.shape[0] and k == B.shape[1] and k:
                    n = B.shape[2]
                    target = _alloc.empty((nb, m, n), dt)
                    if target.size:
                        if blas_wins(dt, nb, m, n, k, A, B):
                            _np_matmul(A, B, out=target)
                        else:
                            run(A, B, (nb,), m, n, k, target)
                    return target
            elif A.ndim == 2 and B.ndim == 2:
                if (
                    A.shape[1] == B.shape[0]
                    and (A.flags.c_contiguous or blasable(A))  # the flag: 0.1 us, not 0.5
                    and (B.flags.c_contiguous or blasable(B))
                ):
                    return _np_matmul(A, B)
            elif A.ndim + B.ndim == 3 and A.shape[-1] == B.shape[0]:
                mat, vec = (A, B) if A.ndim == 2 else (B, A)
                if vec.strides[0] == vec.itemsize and blasable(mat):
                    return _np_matmul(A, B)  # matrix-vector or vector-matrix: gemv
        elif B.dtype == dt and A.ndim == B.ndim and (A.ndim == 2 or A.ndim == 3):
            # The other dtypes, 2-D or one batch axis of the same length on both, no size 0:
            # the general path's dispatch without its checks (a 4x4 int32 product: 14-19 us
            # there, of which the checks and their bookkeeping took 4-9).
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
                target = _alloc.empty(batch + (m, n), dt)
                _dispatch_other(A, B, batch, m, n, k, target)
                return target
    if dask_operand(A, B):
        from ...integrations import dask_arrays as _dask

        return _dask.matmul(A, B, opset=opset, out=out)
    label, a, b, a2, b2, batch, (m, k, n), shape = _check(A, B, opset)
    result, target = prepare_out(label, out, shape, a.dtype, (a, b))
    if target.size:
        if k == 0:
            target[...] = 0
        elif a.dtype in (_F32, _F64) and blas_wins(a.dtype, math.prod(batch), m, n, k, a2, b2):
            _np_matmul(a, b, out=target)
        else:
            _dispatch_other(a2, b2, batch, m, n, k, target)
    return finish(result, target)


def _dispatch_other(a2, b2, batch, m, n, k, target) -> None:
    """``target[...] = a2 @ b2`` for validated 2-D-promoted operands that numpy's BLAS does
    not take as they are: half types on pairs or panels where large, else the own kernels."""
    dt = a2.dtype
    if is_bfloat16(dt) and pairs_win(m, n, k):
        run_bf16_pairs(a2, b2, batch, m, n, k, target)
    elif dt.itemsize == 2 and half_blas_wins(m, n, k):
        run_half_blas(a2, b2, batch, m, n, k, target)
    else:
        run(a2, b2, batch, m, n, k, target)


def _check(A, B, opset):
    """Every decision of MatMul that needs shapes and dtypes only, before any data is read.

    Returns ``(label, a, b, a2, b2, batch, (m, k, n), shape)``: the operands as arrays, their
    2-D promotions (a 1-D ``A`` as one row, a 1-D ``B`` as one column), the broadcast batch
    shape, the matrix sizes and the result's shape.  Raises what ``matmul`` documents.
    """
    version = resolve_version("MatMul", opset)
    label = f"MatMul-{version}"
    a = as_input(A, label)
    b = as_input(B, label)
    allowed = MATMUL_ALLOWED[version]
    check_dtype(label, "A", a.dtype, allowed)
    check_dtype(label, "B", b.dtype, allowed)
    if a.dtype != b.dtype:
        raise TypeError(f"{label}: A and B must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(
            f"{label}: operands must have rank >= 1, got shapes {a.shape} and {b.shape}"
        )

    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    m, k = a2.shape[-2:]
    k2, n = b2.shape[-2:]
    if k != k2:
        raise ValueError(
            f"{label}: inner dimensions differ ({k} and {k2}) for shapes {a.shape} and {b.shape}"
        )
    try:
        batch = a2.shape[:-2]
        if batch != b2.shape[:-2]:
            batch = broadcast_shape(label, batch, b2.shape[:-2])
    except ValueError:
        raise ValueError(
            f"{label}: batch dimensions of shapes {a.shape} and {b.shape} do not broadcast"
        ) from None
    shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    return label, a, b, a2, b2, batch, (m, k, n), shape
