"""MatMul front layer: version and dtype checks, numpy.matmul's shape rules, dispatch.

Dispatch, after every check (measured on 2 Zen 3 cores, see ``_kernels/matmul.py``):

- float32/float64 products that numpy's BLAS does well (2-D, and batches of large matrices)
  go to ``numpy.matmul`` on the validated arrays; the plain 2-D call takes a short path.
- large float16/bfloat16 products (where float32 would go to BLAS): numpy's sgemm on bounded
  float32 panels that a parallel kernel widens, rounded once into the result.
- matrix-vector and vector-matrix shapes: bandwidth-bound kernels that read the matrix once.
- batches of small matrices with row-contiguous B: ``matmul_small``, no per-matrix overhead.
- everything else (integers, float16/bfloat16, small or strided or broadcast batches):
  ``matmul_packed``.
"""

from __future__ import annotations

import threading

import numba
import numpy as np
from numba.core import config as _numba_config
from numba.core.compiler_lock import global_compiler_lock

from ._broadcast import batch_offsets, broadcast_shape, flat_buffer
from ._dtypes import NATIVE, as_input, kernel_view
from ._front import check_dtype, finish, prepare_out
from ._kernels import matmul as _k
from ._parallel import launch
from ._versions import MATMUL_TYPES, resolve_version

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_np_matmul = np.matmul  # the BLAS path (a module global, so tests can watch it)


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
    if out is None and opset is None and type(A) is np.ndarray and type(B) is np.ndarray:
        # The common call, plain 2-D float32/float64 arrays: every check of the general path
        # in a few attribute reads, then numpy's BLAS (the dtype test also rules out
        # non-native byte order).  A 4x4 product costs about numpy's own call.
        # ``is``: numpy's builtin dtypes are singletons, and a dtype that is not one (say, with
        # metadata) just takes the general path; ``==`` on dtypes costs 0.1 us a test.
        dt = A.dtype
        if (dt is _F32 or dt is _F64) and B.dtype is dt:
            if A.ndim == 2 and B.ndim == 2:
                m, k = A.shape
                k2, n = B.shape
                if k == k2 and (dt is _F64 or _blas_wins_2d(m, n, k)):
                    return _np_matmul(A, B)
            elif A.ndim + B.ndim == 3 and A.shape[-1] == B.shape[0]:
                return _np_matmul(A, B)  # matrix-vector or vector-matrix: gemv
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
        elif a.dtype in (_F32, _F64) and _blas_wins(a.dtype, batch, m, n, k):
            _np_matmul(a, b, out=target)
        elif a.dtype.itemsize == 2 and _half_blas_wins(m, n, k):
            _run_half_blas(a2, b2, batch, m, n, k, target)
        else:
            _run(a2, b2, batch, m, n, k, target)
    return finish(result, target)


# Where numpy's BLAS (OpenBLAS here) beats the own kernels on float products, per matrix:
# tiny products, where its call (about 1 us) undercuts a parallel launch (about 10 us), and
# large ones, where sgemm/dgemm run faster per core than matmul_direct (OpenBLAS 94 vs 80
# GFLOP/s per core, float32 1024^3).  In between, OpenBLAS's two threads do not pay off
# (float32 256^3: 0.5 ms, 67 GFLOP/s), while matmul_direct splits the columns of all the
# batch's matrices across the threads at once.  float64: the own kernel is slower per core
# (40 vs 47 GFLOP/s), so BLAS from 2-D products up.
_BLAS_TINY = 48**3
_BLAS_LARGE = 640**3
_BLAS_F64 = 128**3


def _blas_wins(dtype: np.dtype, batch: tuple, m: int, n: int, k: int) -> bool:
    """Whether numpy's BLAS beats the own kernels on a validated float32/float64 product."""
    if dtype == _F64:
        return not batch or m * n * k > _BLAS_F64
    if not batch:
        return _blas_wins_2d(m, n, k)
    return m * n * k > _BLAS_LARGE


def _blas_wins_2d(m: int, n: int, k: int) -> bool:
    """``_blas_wins`` for a 2-D float32 product."""
    mnk = m * n * k
    return mnk <= _BLAS_TINY or mnk > _BLAS_LARGE or m == 1 or n == 1


def _half_blas_wins(m: int, n: int, k: int) -> bool:
    """Whether a float16/bfloat16 product is large enough for sgemm on float32 panels: where
    float32 itself goes to BLAS as a large product (vectors and small products stay on the
    own kernels, which widen halves in registers)."""
    return m > 1 and n > 1 and m * n * k > _BLAS_LARGE


# float32 panels of half operands for sgemm: at most this many elements each (4 MiB), so the
# extra memory is bounded whatever the operands' size; a 1024x1024 operand fits in one panel.
_PANEL = 1 << 20
_PANEL_MIN = 256  # rows or columns of a tile at the least, however long K is
_PANEL_KMAX = 8192  # K is walked in blocks beyond this, partial sums added in float32


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
                    if i0 == 0 or kc < k:  # else this column tile's B panel is still there
                        bo = borg + k0 * brs + j0 * bcs
                        launch(_k.widen_panel, bbuf, bo, brs, bcs, kind, bf)
                    if j0 == 0 or mb < m or kc < k:  # else A, whole in one panel, is there
                        ao = aorg + i0 * ars + k0 * acs
                        launch(_k.widen_panel, abuf, ao, ars, acs, kind, af)
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
    if x.flags.c_contiguous and x.flags.aligned:
        buf = x.reshape(-1)
        if buf.flags.writeable:  # one numba type (read-only) for every operand
            buf = buf.view()
            buf.flags.writeable = False
        origin = 0
        strides = tuple(s // x.itemsize for s in x.strides)
    else:
        buf, origin, strides = flat_buffer(x)
    bshape = x.shape[:-2]
    if bshape == batch and len(batch) == 1 and strides[0] != 0:
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
    to turn its straight-line rows into vector code.  The flag is set only while this one
    signature compiles, under numba's compiler lock, so no other compilation sees it.
    """
    key = (kernel, dtype)  # the operands' dtype fixes every argument type of these kernels
    if key not in _SLP_BUILT:
        with _SLP_LOCK, global_compiler_lock:
            if key not in _SLP_BUILT:
                sig = tuple(kernel.typeof_pyval(x) for x in args)
                # numba re-reads NUMBA_* variables at each compilation when they changed since
                # it last looked, which would reset the flag set below: let it look first.
                _numba_config.reload_config()
                saved = _numba_config.SLP_VECTORIZE
                _numba_config.SLP_VECTORIZE = 1
                try:
                    kernel.compile(sig)
                finally:
                    _numba_config.SLP_VECTORIZE = saved
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
