"""Pow's plan: what runs a validated call (its exponent class, or a half-type table; the
calling thread or the pool), the kernels' arguments, the launch and the fix-up pass.

``make`` turns a call's decisions into a plan the entry point keeps per call key
(``api.pow``, ``core.plans``): small calls of the common layouts go straight to a calling
thread's kernel, every other call to ``run`` without the checks.  ``make_into`` does the same
for calls with an ndarray ``out``.

Every pool kernel (``kernels.py``) takes the same arguments: X and Y each as an *operand*, the
tuple (flat buffer, origin, int64 element strides over the coalesced shape, kind code; a
scalar exponent is its own buffer, with zero strides), then the flat output, the coalesced
shape, the base's smallest integer, the table, the fix-up flags and whether to stream.
``launch_class`` is the one place that assembles them and calls a kernel.  The calling
thread's kernels (``kernels.HERE``) take contiguous operands, few arguments (``_call_here``).
"""

from __future__ import annotations

import math

import numpy as np

from ... import tuning
from ...core.broadcast import broadcast_strides, coalesce, contiguous_buffer, flat_buffer
from ...core.checks import finish, prepare_out
from ...core.dtypes import NATIVE, is_bfloat16, is_half, kernel_view
from ...runtime import cpu, memory, parallel
from . import classes, decisions
from . import kernels as _k
from .tables import TableCache

_UNIT = np.ones(1, np.int64)  # the strides of one contiguous run (never written)
_NONE = np.zeros(1, np.int64)  # a scalar exponent's (never written)


def make(X: np.ndarray, Y, opset, broadcast, axis):
    """The plan of a call: ``decisions.check`` (which raises what ``pow`` documents), then
    the work that is left for operands of this call's key, as a function ``plan(X, Y)``.

    What a plan depends on, which the key must hold: the keywords; ``X``'s and ``Y``'s types,
    dtypes and shapes (the checks); a one-element exponent's value (its class); and the
    flags of ndarray operands (contiguity, alignment, writability: whether a calling thread's
    kernel takes their memory as it is).  Not their strides: a plan either needs C-contiguous
    operands, which the flags say, or reads each call's strides."""
    _, x, y, shape = decisions.check(X, Y, opset, broadcast, axis)
    dtype = x.dtype
    if x is not X or (type(Y) is np.ndarray and not Y.dtype.isnative):
        # an operand converted (its byte order): the checks convert it on every call
        return lambda X, Y: run_checked(X, Y, opset, broadcast, axis)
    if type(Y) is not np.ndarray:
        y_of = lambda Y: y  # noqa: E731 - a constant: the exponent as the version typed it
    elif y is Y:
        y_of = lambda Y: Y  # noqa: E731
    else:  # Pow-1's legacy broadcast: Y reshaped to X's rank
        y_of = lambda Y: Y.reshape(y.shape)  # noqa: E731
    size = math.prod(shape)
    if size and shape == X.shape and _compact(X):
        common = _common_plan(x, y, y_of, shape, size)
        if common is not None:
            return common
    elif size and shape == X.shape and size <= min(tuning.POW_HERE_MAX.values()):
        # A small base of another layout (a slice, a transpose, read-only): the common plan of
        # its C-contiguous copy, which the calling thread's kernel would have made anyway,
        # without working out the layout on every call (``plan.run``: several times the
        # contiguous call; docs/design.md, "Call plans").  The same elements, the same results.
        common = _common_plan(np.array(x, order="C"), y, y_of, shape, size)
        if common is not None:
            return lambda X, Y: common(np.array(X, order="C"), Y)

    def decided(X, Y):
        target = memory.empty(shape, dtype)
        if size:
            run(X, y_of(Y), shape, target)
        return target

    return decided


def make_into(X: np.ndarray, Y, opset, broadcast, axis):
    """The plan of a call with an ndarray ``out``, for operands of ``make``'s key: a function
    ``plan(X, Y, out)`` that checks ``out`` on every call (``checks.prepare_out``).  A result
    of at most ``tuning.POW_HERE_MAX`` elements (the calling thread's) is ``make``'s plan's,
    copied into ``out``: a copy of a few thousand elements costs far less than the general
    path's decisions.  A larger one takes the general path, which writes into ``out`` itself."""
    label, x, _, shape = decisions.check(X, Y, opset, broadcast, axis)
    if math.prod(shape) > min(tuning.POW_HERE_MAX.values()):
        return lambda X, Y, out: run_checked(X, Y, opset, broadcast, axis, out)
    planned, dtype = make(X, Y, opset, broadcast, axis), x.dtype

    def into(X, Y, out):
        # (``out``'s checks only: the result is copied, so ``out`` may overlap an operand)
        result, _ = prepare_out(label, out, shape, dtype, ())
        np.copyto(result, planned(X, Y), casting="no")
        return result

    return into


def run_checked(X, Y, opset, broadcast, axis, out=None):
    """The general path of a call: ``decisions.check`` (which raises what ``pow`` documents
    and converts operands where needed), ``out`` checked or the result allocated
    (``checks.prepare_out``), the power, and its copy into ``out`` where the kernels wrote
    elsewhere.  Every decision is made again: for calls no plan takes, and for plans of calls
    whose operands are converted on every call."""
    label, x, y, shape = decisions.check(X, Y, opset, broadcast, axis)
    result, target = prepare_out(label, out, shape, x.dtype, (x, y))
    if target.size:
        run(x, y, shape, target)
    return finish(result, target)


def _common_plan(x, y, y_of, shape, size):
    """The plan of the common call, a C-contiguous base of the result's shape with a scalar
    exponent or a C-contiguous one of that shape: its kernel's arguments made once, on the
    calling thread or the pool by its size; ``None`` where the call is not one (or takes a
    table, or needs no kernel)."""
    dtype = x.dtype
    if y.size == 1:
        kernel, exponent = scalar_class(dtype, y)
        if kernel == "one" or kernel == "copy":
            return None
        if is_half(dtype) and size >= tuning.TABLE_USE_MIN and kernel not in _HALF_DIRECT:
            return None  # (the tables)
    elif y.shape == shape and _compact(y) and y_of(y) is y:
        kernel, exponent = _k.pow_general, None
    else:
        return None
    imin = np.int64(_imin(dtype))
    xkind = kernel_view(x)[1]
    if not runs_here(kernel, size):
        return _pool_plan(kernel, exponent, dtype, shape, size, imin, xkind, kernel_view(y)[1])
    half = xkind != NATIVE
    flat = len(shape) == 1
    if exponent is not None:
        ykind = NATIVE
    else:
        ykind = kernel_view(y)[1]
    yhalf = ykind != NATIVE
    kind = np.dtype(np.uint16) if half else dtype
    # (the first call's operands have the types of every call of the plan's key)
    xb, yb = kernel_view(x.reshape(-1))[0], exponent
    if exponent is None:
        yb = kernel_view(y.reshape(-1))[0]
    serial = parallel.here_entry(_k.HERE[kernel], xb, xkind, yb, ykind, np.empty(0, kind), imin)

    if not half and not yhalf:  # (the common call, in fewer steps)
        fixup = _k.pow_fixup_here

        def here_flat(X, Y):
            out = np.empty(shape, dtype)
            yb = Y if exponent is None else exponent
            flag = serial(X, xkind, yb, ykind, out, imin)
            if flag:
                parallel.here(fixup, X, xkind, yb, ykind, out, flag)
            return out

        def here_native(X, Y):
            # (``ravel`` of a C-contiguous array: a view, at half ``reshape``'s cost)
            out = np.empty(shape, dtype)
            xb, ob = X.ravel(), out.ravel()
            yb = Y.ravel() if exponent is None else exponent
            flag = serial(xb, xkind, yb, ykind, ob, imin)
            if flag:
                parallel.here(fixup, xb, xkind, yb, ykind, ob, flag)
            return out

        return here_flat if flat else here_native

    def here(X, Y):
        out = np.empty(shape, kind)
        xb = X if flat else X.ravel()
        if half:
            xb = xb.view(np.uint16)
        if exponent is None:
            yb = Y if flat else Y.ravel()
            if yhalf:
                yb = yb.view(np.uint16)
        else:
            yb = exponent
        ob = out if flat else out.ravel()
        flag = serial(xb, xkind, yb, ykind, ob, imin)
        if flag:
            parallel.here(_k.pow_fixup_here, xb, xkind, yb, ykind, ob, flag)
        return out.view(dtype) if half else out

    return here


def _pool_plan(kernel, exponent, dtype, shape, size, imin, xkind, ykind):
    """``_common_plan``'s call on the pool: ``launch_class`` with the arguments of one
    contiguous run (read-only buffers, as every pool call passes them)."""
    dims = [size]
    if exponent is None:
        ystrides = _UNIT
    else:
        ystrides, ykind = _NONE, NATIVE

    def pool(X, Y):
        target = memory.empty(shape, dtype)
        xb = contiguous_buffer(kernel_view(X)[0])
        yb = exponent if exponent is not None else contiguous_buffer(kernel_view(Y)[0])
        launch_class(kernel, (xb, 0, _UNIT, xkind), (yb, 0, ystrides, ykind), target, dims, imin)
        return target

    return pool


def _compact(a: np.ndarray) -> bool:
    """Whether a calling thread's kernel takes ``a``'s memory as it is: C-contiguous, aligned
    and writable (the kernels never write their operands, but numba types a read-only array
    apart, and each type is another compile of the kernel)."""
    flags = a.flags
    return flags.c_contiguous and flags.aligned and flags.writeable


def _call_here(serial, xb, xkind, yb, ykind, out, imin) -> None:
    """Run a calling thread's kernel (``kernels.HERE``), then its fix-up passes if it flagged
    them.  ``xb``, ``out``: 1-D, contiguous, of one length; ``yb`` the same, or the scalar
    exponent."""
    flag = parallel.here(serial, xb, xkind, yb, ykind, out, imin)
    if flag:
        parallel.here(_k.pow_fixup_here, xb, xkind, yb, ykind, out, flag)


def runs_here(kernel, size: int) -> bool:
    """Whether a call of ``size`` result elements on an exponent class's ``kernel`` runs on the
    calling thread (``tuning.POW_HERE_MAX``)."""
    most = tuning.POW_HERE_MAX["general" if kernel is _k.pow_general else "other"]
    return size <= min(most, _k.CHUNK)  # (the calling thread's kernels take one chunk)


def _imin(dtype: np.dtype) -> int:
    return int(np.iinfo(dtype).min) if dtype.kind == "i" else 0


# The kernel of each exponent class (``classes``); "one" and "copy" need none.
CLASS_KERNELS = {
    classes.SQUARE: _k.pow_square,
    classes.CUBE: _k.pow_cube,
    classes.SQRT: _k.pow_sqrt,
    classes.RECIP: _k.pow_recip,
    classes.RSQRT: _k.pow_rsqrt,
    classes.IPOW: _k.pow_ipow,
    classes.GENERAL: _k.pow_general,
    classes.ONE: "one",
    classes.COPY: "copy",
}
_INT64_MAX = np.iinfo(np.int64).max


def scalar_class(xdtype: np.dtype, y: np.ndarray):
    """The kernel and exponent argument for a one-element exponent, or "one" (x**0 = 1) or
    "copy" (x**1 = x).  The class follows from the value (``classes``); the argument is the
    value as float64, except an integer one for the integer classes (``IPOW``, and an integer
    base's integer exponent: int64, uint64 beyond int64)."""
    value = y.reshape(-1)[0]
    if xdtype.kind == "f" or is_bfloat16(xdtype):
        e = float(value)  # the exponent's value converted to float64, as the semantics say
        c = classes.float_base_class(e, xdtype.itemsize <= 4)
        return CLASS_KERNELS[c], (np.int64(e) if c == classes.IPOW else np.float64(e))
    if y.dtype.kind == "f" or is_bfloat16(y.dtype):  # integer base, float exponent
        return _k.pow_general, np.float64(float(value))
    n = int(value)
    return CLASS_KERNELS[classes.int_base_class(n)], (
        np.uint64(n) if n > _INT64_MAX else np.int64(n)
    )


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
    if table is None and runs_here(kernel, target.size):
        if exponent is None:
            yv, ykind = kernel_view(y)
            yb = _contiguous(yv, shape)
        else:
            yb, ykind = exponent, NATIVE
        tview = kernel_view(target)[0].reshape(-1)
        imin = np.int64(_imin(x.dtype))
        _call_here(_k.HERE[kernel], _contiguous(xv, shape), xkind, yb, ykind, tview, imin)
        return
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


def _contiguous(v: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``v`` broadcast to ``shape`` as a 1-D array a calling thread's kernel takes
    (``_compact``): a copy unless it already is one (small calls only: copying costs less than
    their launch would)."""
    if v.shape != shape:
        v = np.broadcast_to(v, shape)
    if not _compact(v):
        v = np.array(v, order="C")
    return v.reshape(-1)


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
