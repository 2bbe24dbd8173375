"""MatMul inside users' ``@njit`` functions: ``numba_onnx_ops.matmul`` as a numba overload.

At compile time the entry point's own checks (``decisions.check``) run on prototypes of the
argument types (``core.njit``), so a dtype or version the entry point refuses is refused here
with its words, as a ``TypingError``; ``opset`` must be a compile-time constant.  At run time
the shapes follow ``numpy.matmul``'s rules, as in ``decisions.check``, and the product runs on
the calling thread, on the own kernels' serial twins (``jit.serial_twin``), so a call inside a
user's ``prange`` never launches onto numba's pool from within it:

- float32/float64: ``matmul_vector`` on the register tile for one vector of columns, whatever
  N: every tile computes each element as the same chain of fused multiply-adds over k in
  order, from 0, so the bits are those of any tile the entry point picks for the shape.  B with
  fewer columns than the tile is copied into a zero-padded buffer as wide as it.  Products
  with N == 1 take ``matmul_rows_dot``, as the entry point does.  On a CPU without the vector
  kernels (``own.vector_tile``), ``matmul_direct``.
- integers: ``matmul_direct`` (exact modulo 2**bits, so every kernel gives the same bits).

Operands of any layout are read through a C-contiguous buffer (a copy unless they are one).

The implementation and every function here are compiled as helpers (``jit.helper``): modules
the user's function links and optimizes once with its own code, the first compile about half as
long as with each optimized and made machine code of its own.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba import types
from numba.core.errors import TypingError
from numba.extending import overload

from ...core.njit import is_absent, literal, prototype, refusals, refuse_half
from ...runtime.cpu import vector_bits
from ...runtime.half import NATIVE
from ...runtime.jit import helper, serial_twin
from ...runtime.numba_private import LINK_ONLY_OPTIONS, compile_with_slp
from . import decisions, own
from . import kernels as _k
from .api import matmul

_ROWS_PER_TASK = 256  # ``own.plan``'s for ``matmul_rows_dot``


@overload(matmul, prefer_literal=True, jit_options=LINK_ONLY_OPTIONS)
def _matmul_overload(A, B, opset=None, out=None):
    opset_value = literal("MatMul", "opset", opset)
    if not is_absent(out):
        raise TypingError("MatMul: out= is not supported in @njit code (the result is new)")
    with refusals():
        label, a, *_ = decisions.check(prototype(A), prototype(B), opset_value)
    for name, ty in (("A", A), ("B", B)):
        if not isinstance(ty, types.Array):
            raise TypingError(f"{label}: {name} must be an array in @njit code, got {ty}")
    refuse_half(label, "A", a.dtype, "matmul")
    return _implementation(label, a.dtype, A, B)


def _implementation(label: str, dtype: np.dtype, A, B):
    nb = max(A.ndim, B.ndim, 2) - 2
    dims_a = _row if A.ndim == 1 else _matrix
    dims_b = _column if B.ndim == 1 else _matrix
    batch_of = _batch_function(max(A.ndim - 2, 0), max(B.ndim - 2, 0), label)
    offsets_a = _offsets_function(nb, A.ndim - 2)
    offsets_b = _offsets_function(nb, B.ndim - 2)
    shape_of = _SHAPES[A.ndim == 1, B.ndim == 1]
    buffer_a = _view if A.layout == "C" else _copy
    buffer_b = _view if B.layout == "C" else _copy
    inner = f"{label}: inner dimensions differ"
    product = _product_function(dtype)

    def impl(A, B, opset=None, out=None):
        ab, m, k = dims_a(A)
        bb, k2, n = dims_b(B)
        if k != k2:
            raise ValueError(inner)
        batch = batch_of(ab, bb)
        result = np.empty(shape_of(batch, m, n), A.dtype)
        nbatch = result.size // max(m * n, 1)
        if result.size:
            out3 = result.reshape(nbatch, m, n)
            if k == 0:
                out3[...] = 0
            else:
                a = buffer_a(A)
                b = buffer_b(B)
                a_off = offsets_a(batch, ab, m * k)
                b_off = offsets_b(batch, bb, k * n)
                product(a, a_off, b, b_off, out3, m, n, k)
        return result

    return impl


@helper()
def _row(a):  # a 1-D A: one row
    return (), 1, a.shape[0]


@helper()
def _column(b):  # a 1-D B: one column
    return (), b.shape[0], 1


@helper()
def _matrix(a):
    return a.shape[:-2], a.shape[-2], a.shape[-1]


_SHAPES = {
    (False, False): helper()(lambda batch, m, n: batch + (m, n)),
    (True, False): helper()(lambda batch, m, n: batch + (n,)),
    (False, True): helper()(lambda batch, m, n: batch + (m,)),
    (True, True): helper()(lambda batch, m, n: batch),
}


@helper()
def _view(x):
    return x.reshape(-1)


@helper()
def _copy(x):
    return np.ascontiguousarray(x).reshape(-1)


@functools.cache
def _batch_function(na: int, nb: int, label: str):
    """The broadcast batch shape of batch shapes of ``na`` and ``nb`` dimensions."""
    if na == 0:
        return helper()(lambda a, b: b)
    if nb == 0:
        return helper()(lambda a, b: a)
    message = f"{label}: batch dimensions do not broadcast"

    def batch_of(a, b):
        for i in range(min(len(a), len(b))):
            da, db = a[len(a) - 1 - i], b[len(b) - 1 - i]
            if da != db and da != 1 and db != 1:
                raise ValueError(message)
        return np.broadcast_shapes(a, b)

    return helper()(batch_of)


@functools.cache
def _offsets_function(nb: int, own_nb: int):
    """Where each matrix of the broadcast batch starts in a C-contiguous operand whose own
    batch has ``own_nb`` dimensions (``nb`` in the result)."""
    if nb == 0:
        return helper()(lambda batch, own, size: np.zeros(1, np.int64))
    if own_nb <= 0:
        return _zero_offsets
    return _batch_offsets


@helper()
def _zero_offsets(batch, own, size):
    n = 1
    for d in batch:
        n *= d
    return np.zeros(n, np.int64)


@helper()
def _batch_offsets(batch, own, size):
    nb, no = len(batch), len(own)
    n = 1
    for d in batch:
        n *= d
    offsets = np.empty(n, np.int64)
    for i in range(n):
        rem, at, stride = i, 0, size
        for d in range(nb - 1, -1, -1):
            index = rem % batch[d]
            rem //= batch[d]
            od = d - (nb - no)
            if od >= 0:
                if own[od] != 1:
                    at += index * stride
                stride *= own[od]
        offsets[i] = at
    return offsets


@functools.cache
def _product_function(dtype: np.dtype):
    """``product(a, a_off, b, b_off, out3, m, n, k)``: ``out3[i] = A[i] @ B[i]`` over flat
    C-contiguous buffers and per-matrix offsets, on the calling thread."""
    lanes = vector_bits() // (8 * dtype.itemsize)
    tile, nr = own.vector_tile(dtype, lanes) if lanes else (None, 0)
    direct = _direct_product(dtype)
    if dtype.kind != "f" or tile is None:
        return direct
    vector = serial_twin(_k.matmul_vector)
    rows_dot = serial_twin(_k.matmul_rows_dot)

    def product(a, a_off, b, b_off, out3, m, n, k):
        acc = np.empty(0, out3.dtype)
        i64 = np.int64
        if n == 1:
            rows_dot(a, a_off, i64(k), i64(1), b, b_off, i64(1), i64(NATIVE),
                     out3.reshape(out3.shape[0], m), i64(m), i64(k), i64(_ROWS_PER_TASK),
                     acc)  # fmt: skip
        elif n >= nr:
            vector(a, a_off, i64(k), i64(1), b, b_off, i64(n), i64(1), out3, i64(m), i64(n),
                   i64(k), False, i64(1), tile, 0)  # fmt: skip
        else:  # B's rows and the result's padded to the tile's width
            padded = _pad_columns(b, b_off, k, n, nr)
            wide = np.empty((out3.shape[0], m, nr), out3.dtype)
            vector(a, a_off, i64(k), i64(1), padded, b_off // n * nr, i64(nr), i64(1), wide,
                   i64(m), i64(nr), i64(k), False, i64(1), tile, 0)  # fmt: skip
            out3[...] = wide[:, :, :n]

    return helper()(product)


@helper()
def _pad_columns(b, b_off, k, n, nr):
    """B's matrices (K x n each, at ``b_off``) as K x nr, the columns past n zero."""
    matrices = b.size // (k * n)
    padded = np.zeros(matrices * k * nr, b.dtype)
    for i in range(matrices):
        for r in range(k):
            for j in range(n):
                padded[(i * k + r) * nr + j] = b[(i * k + r) * n + j]
    return padded


def _direct_product(dtype: np.dtype):
    """``matmul_direct``'s serial twin, compiled with SLP (as the entry point compiles it) for
    the argument types the product passes."""
    direct = serial_twin(_k.matmul_direct)
    buf = types.Array(numba.from_dtype(dtype), 1, "C")
    off = types.Array(types.int64, 1, "C")
    out = types.Array(numba.from_dtype(dtype), 3, "C")
    i64 = types.int64
    acc = types.Array(numba.from_dtype(own.acc_proto(dtype).dtype), 1, "C")
    sig = (buf, off, i64, i64, buf, off, i64, i64, i64, out, i64, i64, i64, i64, acc)
    if direct.slp and sig not in direct.overloads:
        compile_with_slp(direct, sig)

    def product(a, a_off, b, b_off, out3, m, n, k):
        i64 = np.int64
        direct(a, a_off, i64(k), i64(1), b, b_off, i64(n), i64(1), i64(NATIVE), out3, i64(m),
               i64(n), i64(k), i64(1), np.empty(0, out3.dtype))  # fmt: skip

    return helper()(product)
