"""Pow inside users' ``@njit`` functions: ``numba_onnx_ops.pow`` as a numba overload.

At compile time the entry point's own checks (``decisions.check``) run on prototypes of the
argument types (``core.njit``): the version, the dtypes, the weak typing of a Python number
(a float64 or int64 scalar in numba), Pow-1's ``axis``, and the shape rules every value of the
types breaks; a refusal is the entry point's message, as a ``TypingError``.  ``opset``,
``broadcast`` and ``axis`` must be compile-time constants.  At run time the shapes follow the
same rules, a one-element exponent picks its exponent class from its value (``classes``, the
entry point's rule), and the class's kernel runs on the calling thread: the calling thread's
kernels (``kernels.HERE``) and their fix-up pass, on contiguous chunks of ``kernels.CHUNK``
elements, as the entry point runs small calls, so the bits are the entry point's.  A call
inside a user's ``prange`` never launches onto numba's pool from within it.

The implementation and every function here are compiled as helpers (``jit.helper``), as
MatMul's overload's are (``ops.matmul.overloads``).
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba import types
from numba.core.errors import TypingError
from numba.extending import overload

from ...core.njit import is_absent, literal, prototype, refusals, refuse_half
from ...core.versions import POW_LEGACY_BROADCAST, resolve_version
from ...runtime.half import NATIVE
from ...runtime.jit import helper
from ...runtime.numba_private import LINK_ONLY_OPTIONS
from . import classes, decisions
from . import kernels as _k
from .api import pow  # noqa: A004 - the ONNX operator's name

_INT64_MAX = np.iinfo(np.int64).max

# The exponent-class rules, one helper each, shared by every pair of dtypes (their argument types
# are the same for all: a float64 and a flag, or the integer exponent).
_float_class = helper()(classes.float_base_class)
_int_class = helper()(classes.int_base_class)


@overload(pow, prefer_literal=True, jit_options=LINK_ONLY_OPTIONS)
def _pow_overload(X, Y, opset=None, broadcast=None, axis=None, out=None):
    opset_value = literal("Pow", "opset", opset)
    legacy_broadcast = literal("Pow", "broadcast", broadcast)
    legacy_axis = literal("Pow", "axis", axis)
    if not is_absent(out):
        raise TypingError("Pow: out= is not supported in @njit code (the result is new)")
    with refusals():
        label, x, y, _ = decisions.check(
            prototype(X), prototype(Y), opset_value, legacy_broadcast, legacy_axis
        )
    if not isinstance(X, types.Array):
        raise TypingError(f"{label}: X must be an array in @njit code, got {X}")
    refuse_half(label, "X", x.dtype, "pow")
    refuse_half(label, "Y", y.dtype, "pow")
    scalar = _scalar_function(x.dtype, y.dtype)
    general = _general_function(x.dtype)
    to_y = numba.from_dtype(y.dtype)
    if not isinstance(Y, types.Array):  # a number: every element's exponent

        def impl_number(X, Y, opset=None, broadcast=None, axis=None, out=None):
            return scalar(X, to_y(Y), X.shape)

        return impl_number
    if resolve_version("Pow", opset_value) not in POW_LEGACY_BROADCAST:
        return _numpy_broadcast(label, scalar, general)
    if legacy_broadcast == 1:
        start = X.ndim - Y.ndim if legacy_axis is None else legacy_axis % X.ndim
        return _legacy_broadcast(label, scalar, general, start, X.ndim, Y.ndim)
    return _same_shape(label, scalar, general)


def _numpy_broadcast(label, scalar, general):
    message = f"{label}: the shapes of X and Y do not broadcast"

    def impl(X, Y, opset=None, broadcast=None, axis=None, out=None):
        xs, ys = X.shape, Y.shape
        for i in range(min(len(xs), len(ys))):
            dx, dy = xs[len(xs) - 1 - i], ys[len(ys) - 1 - i]
            if dx != dy and dx != 1 and dy != 1:
                raise ValueError(message)
        shape = np.broadcast_shapes(xs, ys)
        if Y.size == 1:
            return scalar(X, np.ravel(Y)[0], shape)
        return general(X, Y, shape)

    return impl


def _same_shape(label, scalar, general):
    message = f"{label}: without broadcast=1, X and Y must have the same shape"

    def impl(X, Y, opset=None, broadcast=None, axis=None, out=None):
        if X.shape != Y.shape:
            raise ValueError(message)
        if Y.size == 1:
            return scalar(X, np.ravel(Y)[0], X.shape)
        return general(X, Y, X.shape)

    return impl


def _legacy_broadcast(label, scalar, general, start, xnd, ynd):
    """Pow-1's ``broadcast=1``: a one-element Y applies to every element, else Y's shape must
    be X's dimensions from ``start`` (``decisions._legacy_broadcast``)."""
    fits = 0 <= start <= xnd - ynd
    before, after = (1,) * max(start, 0), (1,) * max(xnd - start - ynd, 0)
    message = f"{label}: Y must equal the dimensions of X from axis {start} (no size-1 expansion)"

    def impl(X, Y, opset=None, broadcast=None, axis=None, out=None):
        if Y.size == 1:
            return scalar(X, np.ravel(Y)[0], X.shape)
        if not fits:
            raise ValueError(message)
        for d in range(len(Y.shape)):
            if X.shape[start + d] != Y.shape[d]:
                raise ValueError(message)
        y = np.ascontiguousarray(Y).reshape(before + Y.shape + after)
        return general(X, y, X.shape)

    return impl


@helper()
def _flat(x, shape):
    """``x`` broadcast to ``shape`` as a flat C-contiguous array: ``x`` itself where it is
    one, else a copy."""
    if x.shape == shape:
        return np.ascontiguousarray(x).reshape(-1)
    flat = np.empty(np.broadcast_to(x, shape).size, x.dtype)
    i = 0
    for v in np.broadcast_to(x, shape).flat:
        flat[i] = v
        i += 1
    return flat


@functools.cache
def _chunked(kernel, xdtype):
    """``run(xb, yb, out)``: ``kernel`` (one of ``kernels.HERE``), then its fix-up pass where it
    flags one, on each chunk of ``kernels.CHUNK`` elements: the entry point's steps for a
    small call, so the same bits.  ``yb`` is a scalar exponent or an array like ``xb``."""
    fixup = _k.pow_fixup_here
    imin = int(np.iinfo(xdtype).min) if xdtype.kind == "i" else 0
    chunk = _k.CHUNK

    def run_scalar(xb, e, out):
        kind, low = np.int64(NATIVE), np.int64(imin)
        for s in range(0, out.size, chunk):
            t = min(s + chunk, out.size)
            flag = kernel(xb[s:t], kind, e, kind, out[s:t], low)
            if flag:
                fixup(xb[s:t], kind, e, kind, out[s:t], flag)

    def run_array(xb, yb, out):
        kind, low = np.int64(NATIVE), np.int64(imin)
        for s in range(0, out.size, chunk):
            t = min(s + chunk, out.size)
            flag = kernel(xb[s:t], kind, yb[s:t], kind, out[s:t], low)
            if flag:
                fixup(xb[s:t], kind, yb[s:t], kind, out[s:t], flag)

    return helper()(run_scalar), helper()(run_array)


def _here(kernel, xdtype):
    return _chunked(_k.HERE[kernel], xdtype)[0]


@functools.cache
def _scalar_function(xdtype: np.dtype, ydtype: np.dtype):
    """``scalar(X, e, shape)``: ``X ** e`` broadcast to ``shape`` for a one-element exponent
    ``e`` of ``ydtype``, by its class (``classes``) with ``plan.scalar_class``'s arguments."""
    one, copy = classes.ONE, classes.COPY
    if xdtype.kind == "f":
        classify = _float_class
        narrow = xdtype.itemsize <= 4
        square, cube = _here(_k.pow_square, xdtype), _here(_k.pow_cube, xdtype)
        sqrt, recip = _here(_k.pow_sqrt, xdtype), _here(_k.pow_recip, xdtype)
        rsqrt, general = _here(_k.pow_rsqrt, xdtype), _here(_k.pow_general, xdtype)
        ipow = _here(_k.pow_ipow, xdtype) if narrow else None

        def classes_of(xb, value, out):
            e = np.float64(value)
            c = classify(e, narrow)
            if c == classes.SQUARE:
                square(xb, e, out)
            elif c == classes.CUBE:
                cube(xb, e, out)
            elif c == classes.SQRT:
                sqrt(xb, e, out)
            elif c == classes.RECIP:
                recip(xb, e, out)
            elif c == classes.RSQRT:
                rsqrt(xb, e, out)
            else:
                general(xb, e, out)

        if narrow:

            def classes_of_narrow(xb, value, out):
                e = np.float64(value)
                if classify(e, narrow) == classes.IPOW:
                    ipow(xb, np.int64(e), out)
                else:
                    run(xb, value, out)

            run = helper()(classes_of)
            run_class = helper()(classes_of_narrow)
        else:
            run_class = helper()(classes_of)
        code = helper()(lambda value: classify(np.float64(value), narrow))
    elif ydtype.kind == "f":  # an integer base, a float exponent
        general = _here(_k.pow_general, xdtype)
        run_class = helper()(lambda xb, value, out: general(xb, np.float64(value), out))
        code = helper()(lambda value: classes.GENERAL)
    else:
        classify = _int_class
        square, cube = _here(_k.pow_square, xdtype), _here(_k.pow_cube, xdtype)
        ipow, general = _here(_k.pow_ipow, xdtype), _here(_k.pow_general, xdtype)
        wide = ydtype == np.uint64

        def int_classes(xb, value, out):
            c = classify(value)
            if c == classes.SQUARE:
                square(xb, np.int64(value), out)
            elif c == classes.CUBE:
                cube(xb, np.int64(value), out)
            elif c == classes.IPOW:
                ipow(xb, np.int64(value), out)
            elif wide and value > _INT64_MAX:
                general(xb, np.uint64(value), out)
            else:
                general(xb, np.int64(value), out)

        run_class = helper()(int_classes)
        code = classify

    def scalar(X, value, shape):
        result = np.empty(shape, X.dtype)
        out = result.reshape(-1)
        if out.size:
            c = code(value)
            if c == one:
                out[:] = 1
            elif c == copy:
                out[:] = _flat(X, shape)
            else:
                run_class(_flat(X, shape), value, out)
        return result

    return helper()(scalar)


@functools.cache
def _general_function(xdtype: np.dtype):
    """``general(X, Y, shape)``: ``X ** Y`` for an array exponent broadcast to ``shape``."""
    run = _chunked(_k.pow_general_here, xdtype)[1]

    def general(X, Y, shape):
        result = np.empty(shape, X.dtype)
        out = result.reshape(-1)
        if out.size:
            run(_flat(X, shape), _flat(Y, shape), out)
        return result

    return helper()(general)
