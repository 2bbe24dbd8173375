"""MatMul front layer: version and dtype checks, numpy.matmul's shape rules, dispatch."""

from __future__ import annotations

import numpy as np

from ._broadcast import batch_offsets, broadcast_shape, flat_buffer
from ._dtypes import as_input, kernel_view
from ._front import check_dtype, finish, prepare_out
from ._kernels.matmul import matmul_blocked
from ._versions import MATMUL_TYPES, resolve_version

_ACC_PROTOS: dict[np.dtype, np.ndarray] = {}


def _acc_proto(dtype: np.dtype) -> np.ndarray:
    """An empty array of the accumulator type: the kernel allocates its tiles of that dtype.

    Halves accumulate in float32 (semantics.md); integers in 64 bits, whose low bits are the
    narrower type's wrapping sum.
    """
    proto = _ACC_PROTOS.get(dtype)
    if proto is None:
        if dtype.kind == "f" or dtype.itemsize == 2:  # float32/64, float16, bfloat16
            acc = np.float64 if dtype == np.float64 else np.float32
        elif dtype.kind == "i":
            acc = np.int64
        else:
            acc = np.uint64
        proto = _ACC_PROTOS[dtype] = np.empty(0, acc)
    return proto


def matmul(A, B, *, opset: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """Matrix product of ``A`` and ``B`` as ONNX MatMul defines it (numpy.matmul's rules).

    Parameters
    ----------
    A, B : array_like
        Operands of the same dtype, of rank >= 1.  A 1-D ``A`` is a row vector and a 1-D ``B``
        a column vector; those dimensions are removed from the result.  Leading (batch)
        dimensions broadcast numpy-style.  Any layout is read in place.
    opset : int, optional
        Default-domain opset of the model; selects MatMul-1 (float16/32/64), MatMul-9 (adds
        int32, int64, uint32, uint64) or MatMul-13 (adds bfloat16).  ``None``: the newest.
    out : numpy.ndarray, optional
        Array of the result's exact shape and dtype to fill and return.

    Returns
    -------
    numpy.ndarray
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
    version = resolve_version("MatMul", opset)
    label = f"MatMul-{version}"
    a = as_input(A, label)
    b = as_input(B, label)
    allowed = MATMUL_TYPES[version]
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
        batch = broadcast_shape(label, a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise ValueError(
            f"{label}: batch dimensions of shapes {a.shape} and {b.shape} do not broadcast"
        ) from None
    shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    result, target = prepare_out(label, out, shape, a.dtype, (a, b))
    if target.size:
        if k == 0:
            target[...] = 0
        else:
            _run(a2, b2, batch, m, n, k, target)
    return finish(result, target)


def _run(a, b, batch, m, n, k, target) -> None:
    abuf, aorg, astr = flat_buffer(kernel_view(a)[0])
    bbuf, borg, bstr = flat_buffer(kernel_view(b)[0])
    a_off = batch_offsets(aorg, a.shape[:-2], astr[:-2], batch)
    b_off = batch_offsets(borg, b.shape[:-2], bstr[:-2], batch)
    tview, kind = kernel_view(target)
    nbatch = a_off.size
    matmul_blocked(
        abuf, a_off, astr[-2], astr[-1],
        bbuf, b_off, bstr[-2], bstr[-1],
        kind, tview.reshape(nbatch, m, n), m, n, k, _acc_proto(a.dtype),
    )  # fmt: skip
