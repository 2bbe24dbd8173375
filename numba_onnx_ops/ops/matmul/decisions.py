"""MatMul's decisions: the version, the dtypes, numpy.matmul's shape rules (1-D promotion and
removal, broadcast batch dimensions) and the result's shape, from shapes and dtypes alone."""

from __future__ import annotations

from ...core.broadcast import broadcast_shape
from ...core.checks import check_dtype
from ...core.dtypes import as_input
from ...core.versions import MATMUL_ALLOWED, resolve_version


def check(A, B, opset):
    """Every decision of MatMul that needs shapes and dtypes only, before any data is read.

    Returns ``(label, a, b, a2, b2, batch, (m, k, n), shape)``: the operands as arrays, their
    2-D promotions (a 1-D ``A`` as one row, a 1-D ``B`` as one column), the broadcast batch
    shape, the matrix sizes and the result's shape.  Raises what ``matmul`` documents.
    """
    version = resolve_version("MatMul", opset)
    label = f"MatMul-{version}"
    a = as_input(A, label, "A")
    b = as_input(B, label, "B")
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
