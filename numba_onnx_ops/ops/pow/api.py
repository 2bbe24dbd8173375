"""Pow front layer: version and dtype checks, weak Python scalars, broadcasting, dispatch.

(Named ``power`` so the module does not shadow the function ``pow`` in the package namespace.)
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

import numpy as np

from ...core.broadcast import (
    broadcast_shape,
    broadcast_strides,
    coalesce,
    contiguous_buffer,
    flat_buffer,
)
from ...core.checks import check_dtype, dask_operand, finish, prepare_out
from ...core.dtypes import NATIVE, as_input, is_bfloat16, is_half, is_weak_scalar, kernel_view
from ...core.versions import POW_ALLOWED, POW_LEGACY_BROADCAST, POW_SHARED_T, resolve_version
from ...runtime import memory as _alloc
from ...runtime.cpu import last_level_cache_bytes
from ...runtime.parallel import launch
from . import kernels as _k
from .tables import TableCache

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def pow(  # noqa: A001 - the ONNX operator's name
    X: ArrayLike,
    Y: ArrayLike,
    *,
    opset: int | None = None,
    broadcast: int | None = None,
    axis: int | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Elementwise ``X ** Y`` as ONNX Pow defines it.

    Parameters
    ----------
    X : array_like
        The base.  Pow-1/7: float16, float32, float64; Pow-12 adds int32, int64; Pow-13 adds
        bfloat16.
    Y : array_like
        The exponent.  Pow-1/7: the same dtype as ``X``.  Pow-12 on: any of float16/32/64,
        int8..int64, uint8..uint64, independently of ``X``; Pow-15 adds bfloat16.  A plain
        Python ``int``/``float`` is weakly typed: it takes ``X``'s dtype where the version
        needs one dtype, else becomes int64/float64.
    opset : int, optional
        Default-domain opset of the model; selects Pow-1, 7, 12, 13 or 15.  ``None``: newest.
    broadcast, axis : int, optional
        Pow-1's legacy attributes.  ``broadcast=1`` lets ``Y`` be a one-element tensor or match
        a contiguous run of ``X``'s dimensions starting at ``axis`` (default: the trailing
        ones; a negative ``axis`` counts from the end, and must lie in [-rank(X), rank(X) - 1]);
        with ``broadcast=0`` (default) the shapes must be equal.  A Python scalar ``Y``
        is a constant and always applies to every element.  From Pow-7 on, broadcasting is
        numpy-style and these attributes do not exist.
    out : numpy.ndarray, optional
        Array of the result's exact shape and dtype to fill and return.

    If ``X`` or ``Y`` is a ``dask.array.Array``, the result is a lazy dask array with the same
    semantics (checks made at the call; ``out`` is refused; see ``numba_onnx_ops._dask.pow``
    for the chunking).

    Returns
    -------
    numpy.ndarray or dask.array.Array
        The power, of ``X``'s dtype.  Floats: within 1 ulp of the correctly rounded value
        (C99 ``pow`` special values).  Integer bases: exact with wraparound for integer
        exponents (see ``docs/spec/semantics.md`` for negative exponents and float ones).

    Raises
    ------
    TypeError
        A dtype the version does not allow, ``X`` and ``Y`` of different dtypes at Pow-1/7,
        ``broadcast``/``axis`` at Pow-7 or later, or ``out`` of the wrong dtype.
    ValueError
        A bad ``opset``, shapes that do not broadcast (under the version's rules), a bad
        ``broadcast``/``axis`` value, or ``out`` of the wrong shape.
    """
    if out is None and opset is None and broadcast is None and axis is None:
        if type(X) is np.ndarray:
            result = _common_call(X, Y)
            if result is not None:
                return result
    if dask_operand(X, Y):
        from ...integrations import dask_arrays as _dask

        return _dask.pow(X, Y, opset=opset, broadcast=broadcast, axis=axis, out=out)
    label, x, y, shape = _check(X, Y, opset, broadcast, axis)
    result, target = prepare_out(label, out, shape, x.dtype, (x, y))
    if target.size:
        _run(x, y, shape, target)
    return finish(result, target)


# What the common call (``_common_call``) has learned from the general path's checks: the
# exponent class of each Python scalar exponent by (base dtype, type, value), as (kernel, its
# scalar argument, the base's smallest integer), and the (base, exponent) dtype pairs allowed.
# Bounded: cleared when full.
_SCALAR_CALLS: dict = {}
_ARRAY_PAIRS: dict = {}
_LEARNED_MAX = 256
_UNIT = np.ones(1, np.int64)  # the strides of one contiguous run (never written)
_NONE = np.zeros(1, np.int64)  # a scalar exponent's (never written)


def _learn(cache: dict, key, value):
    if len(cache) >= _LEARNED_MAX:
        cache.clear()
    cache[key] = value
    return value


def _common_call(X: np.ndarray, Y):
    """``pow(X, Y)`` for the common call, in fewer steps than the general path (a 16-element
    float32 ``x ** 3.7`` took 28 us there, most of it Python, a float16 ``x ** 2`` 35 us): a
    C-contiguous ``X`` with a Python float or int exponent, or with an ndarray exponent of the
    same shape; newest version, no ``out``.  The same kernels with the same arguments as the
    general path, so the same results, and the general path's checks and errors on the first
    call of each exponent value or dtype pair.  ``None`` when the call is not of that kind.
    """
    dt = X.dtype
    flags = X.flags
    if X.size == 0 or not (flags.c_contiguous and flags.aligned and dt.isnative):
        return None
    ty = type(Y)
    if ty is float or ty is int:
        call = _SCALAR_CALLS.get((dt, ty, Y))
        if call is None:
            _, x, y, _ = _check(X, Y, None, None, None)
            kernel, exponent = _scalar_class(x.dtype, y)
            call = _learn(_SCALAR_CALLS, (dt, ty, Y), (kernel, exponent, np.int64(_imin(dt))))
        kernel, ybuf, imin = call
        if kernel == "one" or kernel == "copy":
            return None
        if is_half(dt) and X.size >= TABLE_USE_MIN and kernel not in _HALF_DIRECT:
            return None  # (the tables)
        ykind, ystrides = NATIVE, _NONE
    elif ty is np.ndarray and Y.shape == X.shape and Y.size > 1:
        yflags = Y.flags
        if not (yflags.c_contiguous and yflags.aligned and Y.dtype.isnative):
            return None
        imin = _ARRAY_PAIRS.get((dt, Y.dtype))
        if imin is None:
            _check(X, Y, None, None, None)
            imin = _learn(_ARRAY_PAIRS, (dt, Y.dtype), np.int64(_imin(dt)))
        kernel = _k.pow_general
        yv, ykind = kernel_view(Y)
        ybuf, ystrides = contiguous_buffer(yv), _UNIT
    else:
        return None
    target = _alloc.empty(X.shape, dt)
    xv, xkind = kernel_view(X)
    x_args = (contiguous_buffer(xv), 0, _UNIT, xkind)
    _launch(kernel, x_args, (ybuf, 0, ystrides, ykind), target, [X.size], imin)
    return target


def _check(X, Y, opset, broadcast, axis):
    """Every decision of Pow that needs shapes and dtypes only, before any data is read.

    Returns ``(label, x, y, shape)``: the operands as arrays of their final dtypes (weak Python
    scalars converted), ``y`` reshaped to ``x``'s rank under Pow-1's legacy broadcast (after
    which numpy's broadcasting gives the same result), and the result's shape.  Raises what
    ``pow`` documents.
    """
    version = resolve_version("Pow", opset)
    label = f"Pow-{version}"
    legacy = version in POW_LEGACY_BROADCAST
    if not legacy and (broadcast is not None or axis is not None):
        raise TypeError(
            f"{label}: the broadcast and axis attributes exist only in Pow-1 (opset < 7)"
        )
    x, y = _operands(label, version, X, Y)
    if legacy and axis is not None:
        axis = _legacy_axis(label, axis, x.ndim)
    if legacy and not is_weak_scalar(Y):
        y = _legacy_broadcast(label, x, y, broadcast, axis)
        shape = x.shape
    else:
        shape = broadcast_shape(label, x.shape, y.shape)
    return label, x, y, shape


def _operands(label: str, version: int, X, Y) -> tuple[np.ndarray, np.ndarray]:
    """Arrays for X and Y with the version's dtype rules applied (weak scalars included)."""
    t, t1 = POW_ALLOWED[version]
    shared = version in POW_SHARED_T
    x_weak, y_weak = is_weak_scalar(X), is_weak_scalar(Y)
    x = None if (shared and x_weak and not y_weak) else as_input(X, label)
    y = None if (shared and y_weak and not x_weak) else as_input(Y, label)
    if x is None:
        check_dtype(label, "Y", y.dtype, t1)
        x = _weak(X, y.dtype)
    if y is None:
        check_dtype(label, "X", x.dtype, t)
        y = _weak(Y, x.dtype)
    check_dtype(label, "X", x.dtype, t)
    check_dtype(label, "Y", y.dtype, t1)
    if shared and x.dtype != y.dtype:
        raise TypeError(f"{label}: X and Y must have the same dtype, got {x.dtype} and {y.dtype}")
    return x, y


def _weak(value, dtype: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore"):  # 1e6 as float16 is inf, as in NumPy's weak promotion
        return np.asarray(value, dtype=dtype)


def _legacy_axis(label: str, axis, rank: int) -> int:
    """Pow-1's ``axis`` as a dimension of X: a negative one counts from the end; outside
    [-rank, rank - 1] (or not an integer) it is a ValueError, whatever Y is."""
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise ValueError(f"{label}: axis must be an integer, got {axis!r}")
    if not -rank <= axis < rank:
        raise ValueError(f"{label}: axis {axis} is out of range for X of rank {rank}")
    return int(axis) % rank


def _legacy_broadcast(label, x: np.ndarray, y: np.ndarray, broadcast, axis) -> np.ndarray:
    """Y reshaped to X's rank under Pow-1's rules (no size-1 expansion), or a ValueError;
    ``axis`` is already a dimension of X (``_legacy_axis``)."""
    if broadcast is None or broadcast == 0:
        if x.shape != y.shape:
            raise ValueError(
                f"{label}: without broadcast=1, X and Y must have the same shape; "
                f"got {x.shape} and {y.shape}"
            )
        return y
    if broadcast != 1:
        raise ValueError(f"{label}: broadcast must be 0 or 1, got {broadcast!r}")
    if y.size == 1 and y.ndim <= x.ndim:
        return y.reshape(())
    start = x.ndim - y.ndim if axis is None else axis
    if y.ndim > x.ndim or not 0 <= start <= x.ndim - y.ndim:
        raise ValueError(
            f"{label}: Y of shape {y.shape} cannot broadcast to X of shape {x.shape} at axis {axis}"
        )
    if x.shape[start : start + y.ndim] != y.shape:
        where = "the trailing dimensions" if axis is None else f"the dimensions from axis {axis}"
        raise ValueError(
            f"{label}: Y of shape {y.shape} must equal {where} of X of shape {x.shape} "
            "(Pow-1 has no size-1 expansion)"
        )
    return y.reshape((1,) * start + y.shape + (1,) * (x.ndim - start - y.ndim))


def _imin(dtype: np.dtype) -> int:
    return int(np.iinfo(dtype).min) if dtype.kind == "i" else 0


# Scalar exponents with a cheaper exact-enough kernel than the general one.
_FLOAT_CLASSES = {
    2.0: _k.pow_square,
    3.0: _k.pow_cube,
    0.5: _k.pow_sqrt,
    -1.0: _k.pow_recip,
    -0.5: _k.pow_rsqrt,
}
_INT_CLASSES = {2: _k.pow_square, 3: _k.pow_cube}


def _scalar_class(xdtype: np.dtype, y: np.ndarray):
    """The kernel and exponent argument for a one-element exponent, or "one" (x**0 = 1) or
    "copy" (x**1 = x)."""
    value = y.reshape(-1)[0]
    if xdtype.kind == "f" or is_bfloat16(xdtype):
        e = float(value)  # semantics.md: the exponent's value converted to float64
        if e == 0.0:
            return "one", None
        if e == 1.0:
            return "copy", None
        if e in _FLOAT_CLASSES:
            return _FLOAT_CLASSES[e], np.float64(e)
        if xdtype.itemsize <= 4 and abs(e) < _k.IPOW_LIMIT and e == int(e):
            return _k.pow_ipow, np.int64(e)
        return _k.pow_general, np.float64(e)
    if y.dtype.kind == "f" or is_bfloat16(y.dtype):  # integer base, float exponent
        return _k.pow_general, np.float64(float(value))
    n = int(value)
    if n == 0:
        return "one", None
    if n == 1:
        return "copy", None
    if n in _INT_CLASSES:
        return _INT_CLASSES[n], np.int64(n)
    if abs(n) < _k.IPOW_LIMIT:
        return _k.pow_ipow, np.int64(n)
    return _k.pow_general, (np.uint64(n) if n > np.iinfo(np.int64).max else np.int64(n))


# Half-type bases with a one-element exponent go through a table of the results for all 65,536
# bit patterns, built by the kernels below (so bit-identical to them) and cached.  A cached
# table serves calls from TABLE_USE_MIN elements on (below, launch costs dominate both paths:
# measured equal at 256 elements, the table ahead from about 1K).  A table is built once a
# call, or the calls since the last build with that exponent, reach TABLE_BUILD_MIN elements:
# building costs the direct kernel over 65,536 elements.  Squares, square roots and
# reciprocals stay direct: their vectorized loops run at memory speed, ahead of a scalar gather
# (10M float16, CPU time on 2 threads: x ** 2 1.2 ms, table 3.0 ms).
TABLE_BUILD_MIN = 65536
TABLE_USE_MIN = 1024
_HALF_DIRECT = (_k.pow_square, _k.pow_sqrt, _k.pow_recip)
_tables = TableCache()
_NO_TABLE = np.empty(0, np.uint16)
_NO_TABLE.flags.writeable = False  # the type of every cached table: one specialization
_NO_FLAGS = np.zeros(0, np.uint8)  # the flags of every class but GENERAL (never written)


def _run(x: np.ndarray, y: np.ndarray, shape: tuple[int, ...], target: np.ndarray) -> None:
    if y.size == 1:
        kernel, exponent = _scalar_class(x.dtype, y)
        if kernel == "one":
            target[...] = 1
            return
        if kernel == "copy":
            np.copyto(target, np.broadcast_to(x, shape))
            return
        if is_half(x.dtype) and target.size >= TABLE_USE_MIN and kernel not in _HALF_DIRECT:
            table = _half_table(x.dtype, y, kernel, exponent, target.size)
            if table is not None:
                _direct(kernel, exponent, x, y, shape, target, table)
                return
    else:
        kernel, exponent = _k.pow_general, None
    _direct(kernel, exponent, x, y, shape, target)


def _half_table(xdtype: np.dtype, y: np.ndarray, kernel, exponent, size: int):
    """The table of a half-type base and this exponent, or ``None`` while it does not pay."""
    key = (xdtype, y.dtype, y.tobytes())
    table = _tables.get(key)
    if table is not None or not _tables.count(key, size, TABLE_BUILD_MIN):
        return table

    def build() -> np.ndarray:
        every = np.arange(65536, dtype=np.uint16).view(xdtype)
        table = np.empty(65536, xdtype)
        _direct(kernel, exponent, every, y, every.shape, table)
        return table.view(np.uint16)

    return _tables.get_or_build(key, build)


def _direct(kernel, exponent, x, y, shape, target: np.ndarray, table=None) -> None:
    """Run an exponent class's kernel (``exponent``: its scalar argument, ``None`` for an
    array ``y``); with a ``table``, the kernel maps ``x`` through it instead of computing."""
    xv, xkind = kernel_view(x)
    xbuf, xorg, xstr = flat_buffer(xv)
    if exponent is None:
        yv, ykind = kernel_view(y)
        ybuf, yorg, ystr = flat_buffer(yv)
        ystrides = broadcast_strides(y.shape, ystr, shape)
    else:
        ybuf, yorg, ykind = exponent, 0, NATIVE
        ystrides = [0] * len(shape)
    dims, (xs, ys) = coalesce(list(shape), broadcast_strides(x.shape, xstr, shape), ystrides)
    x_args = (xbuf, xorg, np.array(xs, np.int64), xkind)
    y_args = (ybuf, yorg, np.array(ys, np.int64), ykind)
    _launch(kernel, x_args, y_args, target, dims, np.int64(_imin(x.dtype)), table)


def _launch(kernel, x_args, y_args, target: np.ndarray, dims: list[int], imin, table=None):
    """Run an exponent class's kernel into ``target``, then the fix-up pass where it flagged
    elements.  ``x_args``, ``y_args``: each operand's (flat buffer, origin, int64 element
    strides over ``dims``, kind code); ``dims``: the coalesced shape; ``imin``: the base's
    smallest integer as an int64 (0 for floats)."""
    tview = kernel_view(target)[0].reshape(-1)
    flags = _NO_FLAGS
    if kernel is _k.pow_general and table is None and dims[-1]:
        # one byte per task: the fix-up passes a float32/float64 chunk still needs
        flags = np.zeros(tview.size // dims[-1] * -(-dims[-1] // _k.CHUNK), np.uint8)
    # A result as large as the last-level cache would not stay there: the classes bound by
    # memory then write it past the caches (``_kernels.streaming``).
    stream = target.nbytes >= last_level_cache_bytes()
    args = (
        *x_args, *y_args, tview, np.array(dims, np.int64), imin,
        _NO_TABLE if table is None else table, flags, stream,
    )  # fmt: skip
    launch(kernel, *args)
    if np.count_nonzero(flags):  # (a quarter of ``flags.any()``'s cost on small calls)
        launch(_k.pow_fixup, *args)
