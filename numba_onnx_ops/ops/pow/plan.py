"""Pow's plan: the kernel that runs a validated call (its exponent class, or a half-type
table), the kernels' arguments, the launch and the fix-up pass.

Every class kernel (``kernels.py``) takes the same arguments: X and Y each as an *operand*, the
tuple (flat buffer, origin, int64 element strides over the coalesced shape, kind code; a
scalar exponent is its own buffer, with zero strides), then the flat output, the coalesced
shape, the base's smallest integer, the table, the fix-up flags and whether to stream.
``launch_class`` is the one place that assembles them and calls a kernel.
"""

from __future__ import annotations

import numpy as np

from ... import tuning
from ...core.broadcast import broadcast_strides, coalesce, contiguous_buffer, flat_buffer
from ...core.dtypes import NATIVE, is_bfloat16, is_half, kernel_view
from ...runtime import cpu, memory, parallel
from . import decisions
from . import kernels as _k
from .tables import TableCache

# What ``common_call`` has learned from the general path's checks: the
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


def common_call(X: np.ndarray, Y):
    """``pow(X, Y)`` for the common call, in fewer steps than the general path (whose Python
    dominates a small call): a C-contiguous ``X`` with a Python float or int exponent, or with
    an ndarray exponent of the same shape; newest version, no ``out``.  The same kernels with
    the same arguments as the general path, so the same results, and the general path's checks
    and errors on the first call of each exponent value or dtype pair.  ``None`` when the call
    is not of that kind.
    """
    dt = X.dtype
    flags = X.flags
    if X.size == 0 or not (flags.c_contiguous and flags.aligned and dt.isnative):
        return None
    ty = type(Y)
    if ty is float or ty is int:
        call = _SCALAR_CALLS.get((dt, ty, Y))
        if call is None:
            _, x, y, _ = decisions.check(X, Y, None, None, None)
            kernel, exponent = scalar_class(x.dtype, y)
            call = _learn(_SCALAR_CALLS, (dt, ty, Y), (kernel, exponent, np.int64(_imin(dt))))
        kernel, ybuf, imin = call
        if kernel == "one" or kernel == "copy":
            return None
        if is_half(dt) and X.size >= tuning.TABLE_USE_MIN and kernel not in _HALF_DIRECT:
            return None  # (the tables)
        ykind, ystrides = NATIVE, _NONE
    elif ty is np.ndarray and Y.shape == X.shape and Y.size > 1:
        yflags = Y.flags
        if not (yflags.c_contiguous and yflags.aligned and Y.dtype.isnative):
            return None
        imin = _ARRAY_PAIRS.get((dt, Y.dtype))
        if imin is None:
            decisions.check(X, Y, None, None, None)
            imin = _learn(_ARRAY_PAIRS, (dt, Y.dtype), np.int64(_imin(dt)))
        kernel = _k.pow_general
        yv, ykind = kernel_view(Y)
        ybuf, ystrides = contiguous_buffer(yv), _UNIT
    else:
        return None
    target = memory.empty(X.shape, dt)
    xv, xkind = kernel_view(X)
    x = (contiguous_buffer(xv), 0, _UNIT, xkind)
    launch_class(kernel, x, (ybuf, 0, ystrides, ykind), target, [X.size], imin)
    return target


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


def scalar_class(xdtype: np.dtype, y: np.ndarray):
    """The kernel and exponent argument for a one-element exponent, or "one" (x**0 = 1) or
    "copy" (x**1 = x)."""
    value = y.reshape(-1)[0]
    if xdtype.kind == "f" or is_bfloat16(xdtype):
        e = float(value)  # the exponent's value converted to float64, as the semantics say
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
# bit patterns, built by the class kernels (so bit-identical to them) and cached; when, in
# ``tuning`` (TABLE_USE_MIN, TABLE_BUILD_MIN).  Squares, square roots and reciprocals stay
# direct: their vectorized loops run at memory speed, ahead of a scalar gather.
_HALF_DIRECT = (_k.pow_square, _k.pow_sqrt, _k.pow_recip)
_tables = TableCache()
_NO_TABLE = np.empty(0, np.uint16)
_NO_TABLE.flags.writeable = False  # the type of every cached table: one specialization
_NO_FLAGS = np.zeros(0, np.uint8)  # the flags of every class but GENERAL (never written)


def run(x: np.ndarray, y: np.ndarray, shape: tuple[int, ...], target: np.ndarray) -> None:
    """``target[...] = x ** y`` for operands of the verdict (``decisions.check``) broadcast to
    ``shape``, into a C-contiguous ``target`` of that shape with at least one element."""
    if y.size == 1:
        kernel, exponent = scalar_class(x.dtype, y)
        if kernel == "one":
            target[...] = 1
            return
        if kernel == "copy":
            np.copyto(target, np.broadcast_to(x, shape))
            return
        if is_half(x.dtype) and target.size >= tuning.TABLE_USE_MIN and kernel not in _HALF_DIRECT:
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
    if table is not None or not _tables.count(key, size, tuning.TABLE_BUILD_MIN):
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
    xop = (xbuf, xorg, np.array(xs, np.int64), xkind)
    yop = (ybuf, yorg, np.array(ys, np.int64), ykind)
    launch_class(kernel, xop, yop, target, dims, np.int64(_imin(x.dtype)), table)


def launch_class(kernel, x, y, target: np.ndarray, dims: list[int], imin, table=None):
    """Run an exponent class's kernel into ``target``, then the fix-up pass where it flagged
    elements.  ``x``, ``y``: the operands (see the module docstring) over ``dims``, the
    coalesced shape; ``imin``: the base's smallest integer as an int64 (0 for floats)."""
    tview = kernel_view(target)[0].reshape(-1)
    flags = _NO_FLAGS
    if kernel is _k.pow_general and table is None and dims[-1]:
        # one byte per task: the fix-up passes a float32/float64 chunk still needs
        flags = np.zeros(tview.size // dims[-1] * -(-dims[-1] // _k.CHUNK), np.uint8)
    # A result as large as the last-level cache would not stay there: the classes bound by
    # memory then write it past the caches (``streaming.py``).
    stream = target.nbytes >= cpu.last_level_cache_bytes()
    args = (
        *x, *y, tview, np.array(dims, np.int64), imin,
        _NO_TABLE if table is None else table, flags, stream,
    )  # fmt: skip
    parallel.launch(kernel, *args)
    if np.count_nonzero(flags):  # (cheaper than ``flags.any()`` on small calls)
        parallel.launch(_k.pow_fixup, *args)
