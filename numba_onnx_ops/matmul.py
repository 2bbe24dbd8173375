"""MatMul front layer: version and dtype checks, numpy.matmul's shape rules, dispatch.

Dispatch, after every check (measured on 2 Zen 3 cores; figures beside ``_blas_wins`` and
``_half_blas_wins``):

- float32/float64 products whose layout numpy's BLAS takes, except long batches of small
  matrices: ``numpy.matmul`` (OpenBLAS) on the validated arrays; plain 2-D and matrix-vector
  calls take a short path.
- float16/bfloat16 products of at least 192^3 multiply-adds per matrix: numpy's sgemm on
  bounded float32 panels that a parallel kernel widens, rounded once into the result.
- everything else (integers, smaller half products, long batches of small float matrices,
  layouts BLAS cannot take) runs on the own kernels: ``matmul_rows_dot``/``matmul_cols_axpy``
  for matrix-vector shapes, ``matmul_small`` for tiny matrices with row-contiguous B,
  ``matmul_direct`` for most others, ``matmul_packed`` for long K and mid-size half products.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING

import numba
import numpy as np

from ._broadcast import batch_offsets, broadcast_shape, flat_buffer
from ._dtypes import NATIVE, as_input, kernel_view
from ._front import check_dtype, dask_operand, finish, prepare_out
from ._kernels import matmul as _k
from ._numba_private import compile_with_slp
from ._parallel import launch
from ._versions import MATMUL_TYPES, resolve_version

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
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
        if (dt is _F32 or dt is _F64) and B.dtype is dt and A.ndim + B.ndim <= 4:
            if A.ndim == 2 and B.ndim == 2:
                if (
                    A.shape[1] == B.shape[0]
                    and (A.flags.c_contiguous or _blasable(A))  # the flag: 0.1 us, not 0.5
                    and (B.flags.c_contiguous or _blasable(B))
                ):
                    return _np_matmul(A, B)
            elif A.ndim + B.ndim == 3 and A.shape[-1] == B.shape[0]:
                mat, vec = (A, B) if A.ndim == 2 else (B, A)
                if vec.strides[0] == vec.itemsize and _blasable(mat):
                    return _np_matmul(A, B)  # matrix-vector or vector-matrix: gemv
    if dask_operand(A, B):
        from . import _dask

        return _dask.matmul(A, B, opset=opset, out=out)
    label, a, b, a2, b2, batch, (m, k, n), shape = _check(A, B, opset)
    result, target = prepare_out(label, out, shape, a.dtype, (a, b))
    if target.size:
        if k == 0:
            target[...] = 0
        elif a.dtype in (_F32, _F64) and _blas_wins(a.dtype, math.prod(batch), m, n, k, a2, b2):
            _np_matmul(a, b, out=target)
        elif a.dtype.itemsize == 2 and _half_blas_wins(m, n, k):
            _run_half_blas(a2, b2, batch, m, n, k, target)
        else:
            _run(a2, b2, batch, m, n, k, target)
    return finish(result, target)


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
        batch = a2.shape[:-2]
        if batch != b2.shape[:-2]:
            batch = broadcast_shape(label, batch, b2.shape[:-2])
    except ValueError:
        raise ValueError(
            f"{label}: batch dimensions of shapes {a.shape} and {b.shape} do not broadcast"
        ) from None
    shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    return label, a, b, a2, b2, batch, (m, k, n), shape


# Where numpy's BLAS (OpenBLAS) beats the own kernels on float32/float64, measured idle on
# 2 Zen 3 cores the way the peer comparison times (interleaved, settled samples of 5 ms; the
# ratio is numpy's time / the own kernel's): every 2-D product (0.08 at 32^3, 0.5 at 256^3,
# 0.47 at 512^3: a numba parallel launch costs tens of microseconds and sgemm is faster per
# core) and batches of up to hundreds of matrices (64 x 8^3: 0.37, 64 x 64^3: 0.9, 64 x
# 128x64x128: 0.56, 64 x 256^3 broadcast: 0.7).  The own kernels win on long batches of small
# matrices, where numpy pays about 0.24 us per matrix: float32 1024 x 8^3 1.9, 1024 x 16^3
# 1.4, 1024 x 32^3 1.9, 1024 x 48^3 1.5 (512 x 24^3 even); float64 only from 4096 x 16^3
# (1.3; 1024 x 32^3 0.9).
_OWN_MIN_BATCH = {_F32: 1024, _F64: 4096}
_OWN_MAX_MNK = {_F32: 48**3, _F64: 16**3}


def _blas_wins(dtype: np.dtype, nbatch: int, m: int, n: int, k: int, a2, b2) -> bool:
    """Whether numpy's BLAS beats the own kernels on a validated float32/float64 product of
    2-D-promoted operands (``nbatch`` matrices; 1 without batch dimensions)."""
    if not (_blasable(a2) and _blasable(b2)):
        return False
    return nbatch < _OWN_MIN_BATCH[dtype] or m * n * k > _OWN_MAX_MNK[dtype]


def _blasable(x: np.ndarray) -> bool:
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


def _half_blas_wins(m: int, n: int, k: int) -> bool:
    """Whether a float16/bfloat16 product is large enough for sgemm on float32 panels.

    Measured idle as for ``_blas_wins`` (panel time / own kernel time): 2-D 128^3 0.95 and
    1.35, 256^3 0.58 and 0.67, 512^3 0.53 and 0.54 (float16 and bfloat16); a batch of 16
    128^3 products 1.3 and 2.0, where the per-matrix panel steps cost more than they save.
    Vectors stay on the own kernels, which widen halves in registers.
    """
    return m > 1 and n > 1 and m * n * k >= _HALF_BLAS_MIN


_HALF_BLAS_MIN = 192**3

# float32 panels of half operands for sgemm: at most this many elements each (4 MiB), so the
# extra memory is bounded whatever the operands' size; a 1024x1024 operand fits in one panel.
_PANEL = 1 << 20
_PANEL_MIN = 256  # rows or columns of a tile at the least, however long K is
_PANEL_KMAX = _PANEL // _PANEL_MIN  # K is walked in blocks beyond this, partial sums added


def _run_half_blas(a2, b2, batch, m, n, k, target) -> None:
    """float16/bfloat16 product as float32 sgemm over bounded panels, rounded once.

    Per tile of C (mb x nb, all of K): widen a panel of A and of B to float32 (in parallel,
    F16C for float16), sgemm them with numpy's BLAS, accumulating in float32, and narrow the
    tile into the result with one rounding -- semantics.md's "accumulate in float32, round
    once", at BLAS speed.  A B panel serves every row tile; an A panel is widened once per
    column tile (once in all when one tile spans the columns).
    """
    kind = kernel_view(a2)[1]
    kc = min(k, _PANEL_KMAX)
    nb = min(n, max(_PANEL_MIN, _PANEL // kc))
    mb = min(m, max(_PANEL_MIN, _PANEL // kc))
    scratch = np.empty(mb * kc + kc * nb + 2 * mb * nb, _F32)
    out = kernel_view(target)[0].reshape(-1)
    a3 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b3 = np.broadcast_to(b2, batch + b2.shape[-2:])
    for bi, index in enumerate(np.ndindex(*batch)):
        abuf, aorg, (ars, acs) = flat_buffer(kernel_view(a3[index])[0])
        bbuf, borg, (brs, bcs) = flat_buffer(kernel_view(b3[index])[0])
        for j0 in range(0, n, nb):
            nj = min(nb, n - j0)
            for i0 in range(0, m, mb):
                mi = min(mb, m - i0)
                for k0 in range(0, k, kc):
                    kk = min(kc, k - k0)
                    af, bf, cf, part = _panels(scratch, (mb, kc, nb), mi, kk, nj)
                    # Widen only what changed (a panel with no rows is skipped): B, unless
                    # this column tile's is still there; A, unless it is whole in one panel.
                    new_b = bf if i0 == 0 or kc < k else bf[:0]
                    new_a = af if j0 == 0 or mb < m or kc < k else af[:0]
                    ao = aorg + i0 * ars + k0 * acs
                    bo = borg + k0 * brs + j0 * bcs
                    launch(
                        _k.widen_panels,
                        abuf, ao, ars, acs, new_a, bbuf, bo, brs, bcs, new_b, kind,
                    )  # fmt: skip
                    with np.errstate(all="ignore"):  # IEEE results, as the own kernels
                        if k0 == 0:
                            _np_matmul(af, bf, out=cf)
                        else:
                            _np_matmul(af, bf, out=part)
                            cf += part
                launch(_k.narrow_panel, cf, kind, out, bi * m * n + i0 * n + j0, n)


def _panels(scratch: np.ndarray, tile: tuple[int, int, int], mi: int, kk: int, nj: int):
    """C-contiguous views of ``scratch`` of exactly this tile's shapes: A panel (mi, kk),
    B panel (kk, nj), C tile and partial sums (mi, nj).  Offsets come from the largest tile
    ``(mb, kc, nb)``, so a panel kept for the next tile stays where it was."""
    mb, kc, nb = tile
    ob = mb * kc
    oc = ob + kc * nb
    op = oc + mb * nb
    return (
        scratch[: mi * kk].reshape(mi, kk),
        scratch[ob : ob + kk * nj].reshape(kk, nj),
        scratch[oc : oc + mi * nj].reshape(mi, nj),
        scratch[op : op + mi * nj].reshape(mi, nj),
    )


def _acc_dtype(dtype: np.dtype) -> np.dtype:
    """Half types accumulate in float32 (semantics.md); every other type in itself, where
    integer wraparound is exactly the result modulo 2**bits."""
    return _F32 if dtype.itemsize == 2 else dtype


_ACC_PROTOS: dict[np.dtype, np.ndarray] = {}


def _acc_proto(dtype: np.dtype) -> np.ndarray:
    """An empty array of the accumulator type: kernels allocate their tiles of that dtype."""
    proto = _ACC_PROTOS.get(dtype)
    if proto is None:
        proto = _ACC_PROTOS[dtype] = np.empty(0, _acc_dtype(dtype))
    return proto


def _operand(x: np.ndarray, batch: tuple[int, ...], nbatch: int):
    """``(flat read-only buffer, per-matrix offsets, row stride, column stride)`` of a 2-D or
    batched operand, in elements; no data is copied."""
    buf, origin, strides = flat_buffer(x)
    bshape = x.shape[:-2]
    if not batch:
        offsets = np.array([origin], np.int64)
    elif bshape == batch and len(batch) == 1 and strides[0] != 0:
        offsets = np.arange(origin, origin + nbatch * strides[0], strides[0])
    else:
        offsets = batch_offsets(origin, bshape, strides[:-2], batch)
        if not offsets.flags.writeable:  # (a broadcast view for 2-D operands)
            offsets = offsets.copy()
    # Every call must present the kernels with the same argument types (writable int64
    # offsets, read-only buffers): a new type would compile a second specialization, and
    # outside _launch_slp, without SLP.
    return buf, offsets.astype(np.int64, copy=False), strides[-2], strides[-1]


# matmul_direct keeps a K x (two vectors) strip of B per task; past this K (a 256 KiB strip of
# float32) the packed kernel, which blocks K, takes over.
_DIRECT_KMAX = 4096
_NTHREADS = numba.config.NUMBA_NUM_THREADS  # the pool size; reading it starts no threads
_SLP_LOCK = threading.Lock()
_SLP_BUILT: set = set()


def _launch_slp(kernel, dtype: np.dtype, *args):
    """Launch ``kernel``, compiling it first with LLVM's SLP vectorizer for these types.

    numba turns SLP off by default (``NUMBA_SLP_VECTORIZE``); the small-matrix kernel needs it
    to turn its straight-line rows into vector code (see ``_numba_private.compile_with_slp``).
    """
    key = (kernel, dtype)  # the operands' dtype fixes every argument type of these kernels
    if key not in _SLP_BUILT:
        with _SLP_LOCK:
            if key not in _SLP_BUILT:
                compile_with_slp(kernel, tuple(kernel.typeof_pyval(x) for x in args))
                _SLP_BUILT.add(key)
    return launch(kernel, *args)


def _run(a, b, batch, m, n, k, target) -> None:
    """Pick and launch the kernel for validated 2-D-promoted operands and a C-contiguous target."""
    nbatch = target.size // (m * n)
    av, kind = kernel_view(a)
    bv, _ = kernel_view(b)
    abuf, a_off, a_rs, a_cs = _operand(av, batch, nbatch)
    bbuf, b_off, b_rs, b_cs = _operand(bv, batch, nbatch)
    tview = kernel_view(target)[0]
    acc = _acc_proto(a.dtype)
    lanes = 32 // acc.itemsize  # accumulator elements in one 32-byte vector
    A = (abuf, a_off, a_rs, a_cs)
    if n == 1:  # matrix-vector: one dot product per row
        x = (bbuf, b_off, b_rs)
        launch(_k.matmul_rows_dot, *A, *x, kind, tview.reshape(nbatch, m), m, k, 256, acc)
        return
    B = (bbuf, b_off, b_rs, b_cs)
    if m == 1:  # vector-matrix: rows of B scaled and added, 1024 columns per task
        x = (abuf, a_off, a_cs)
        launch(_k.matmul_cols_axpy, *x, *B, kind, tview.reshape(nbatch, n), n, k, 1024, acc)
        return
    out3 = tview.reshape(nbatch, m, n)
    if b_cs == 1 and lanes <= n < 2 * lanes and max(m, k) <= 64:
        _launch_slp(_k.matmul_small, a.dtype, *A, bbuf, b_off, b_rs, kind, out3, m, n, k, acc)
    elif k <= _DIRECT_KMAX and (kind == NATIVE or m * n * k <= 1 << 18):
        # Half types widen A at every use here, so large ones go to the packed kernel,
        # which widens each element once (measured 38 vs 65 GFLOP/s per core at 1024).
        items = nbatch * -(-n // (2 * lanes))
        chunks = min(items, 4 * _NTHREADS)
        _launch_slp(_k.matmul_direct, a.dtype, *A, *B, kind, out3, m, n, k, chunks, acc)
    else:
        blocks = _packed_blocks(acc.itemsize, nbatch, m, n, k)
        launch(_k.matmul_packed, *A, *B, kind, out3, m, n, k, *blocks, acc)


def _packed_blocks(itemsize: int, nbatch: int, m: int, n: int, k: int):
    """Block sizes ``(mt, nt, kc, mg)`` of ``matmul_packed`` for one problem."""
    kcmax = 2048 // itemsize  # a k-row of a panel: 2 KiB
    kc = -(-k // -(-k // kcmax))
    kc = -(-kc // 8) * 8
    mg = max(4, (16384 // (kc * itemsize)) // 4 * 4)  # an A group of 16 KiB stays in L1
    nt = 258
    # Rows per task: many, so each packed B block serves many rows, but at most 1024, which
    # bounds the float32 tile of the half types at 1024 x 258 x 4 bytes (1 MiB) per task.
    mt = min(m, 1024)
    tasks = nbatch * -(-n // nt)
    while tasks * -(-m // mt) < 4 and mt > 64:
        mt = -(-mt // 2)
    return mt, nt, kc, mg
