"""Elementwise Pow kernels over broadcast stride maps, one per exponent class.

``plan.run`` picks the class once per call (``SQUARE`` for a scalar 2, ..., ``GENERAL``
for everything else) and calls that class's kernel; a class is a compile-time constant inside
its kernel, so each compiled loop holds one element function and LLVM vectorizes it.  Kernels
compile lazily, per class and operand types, on first use.  GENERAL on float32/float64 bases
leaves two rare passes, C99's signs and zero bases and the elements libm must compute, to
``pow_fixup``, which runs on the tasks it flagged and compiles only when some data needs it.

Operands arrive as flat buffers with an origin and per-axis element strides (0 on broadcast
axes, see ``core.broadcast``), or, for a single-element exponent, as a scalar (float64 for float
bases, int64/uint64 for integer ones).  The output is a flat C-contiguous buffer.  Element
rules follow the documented semantics (``api.pow``); the float arithmetic is in ``powmath``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange, types

from ...runtime.convert import narrow, widen
from ...runtime.cpu import amd_zen, vector_bits
from ...runtime.half import NATIVE, f32_as_u32, f64_as_u64, half_to_f32, load_u16x4
from ...runtime.jit import helper, helper_overload, kernel
from ...runtime.schedule import call_state, spread
from ...runtime.stack import heap_array, stack_array
from ...runtime.vectors import LINE, line_misalignment, prefetch_rows_for_read
from .ints import int_max, int_min
from .powmath import (
    cube_wide,
    exp_wide_of_log,
    exp_wide_vectors,
    ipow_narrow,
    log_wide,
    log_wide_normal,
    narrow_exp2,
    narrow_exp2_vectors,
    narrow_log_term,
    narrow_sign_factors,
    pow_by_squaring,
    pow_narrow_abs,
    pow_narrow_needs_libm,
    pow_narrow_sign,
    pow_wide_finish,
    pow_wide_needs_libm,
    rsqrt_narrow,
    rsqrt_wide,
    sqrt_any,
    sqrt_narrow,
)
from .streaming import (
    CUBE_LINE,
    RECIP_LINE,
    SQRT_LINE,
    SQUARE_LINE,
    line_ops,
    power_line,
    store_fence,
)

_U8 = types.uint8
_U32 = types.uint32
_I64 = types.int64
_U64 = types.uint64
_F32_INF_BITS = _U32(0x7F800000)
_F32_MIN_NORMAL_BITS = _U32(0x00800000)
_F32_SIGN_BIT = _U32(0x80000000)
_F64_ABS = _U64(0x7FFFFFFFFFFFFFFF)
_F64_INF_BITS = _U64(0x7FF << 52)
_F64_MIN_NORMAL_BITS = _U64(1 << 52)

# Exponent classes.  IPOW is a scalar integer exponent with |n| < IPOW_LIMIT (float32 and half
# bases square in float64; float64 bases take GENERAL, as squaring would lose accuracy).
SQUARE, CUBE, SQRT, RECIP, RSQRT, IPOW, GENERAL = range(7)
IPOW_LIMIT = 32

# Inner-axis chunk per parallel task: long enough to amortize the row decomposition,
# short enough that a single long row still splits across both cores; 16K float32 elements
# (64 KB per operand) stay in L2 for the rare second pass over a chunk.
CHUNK = 16384


def exponent_as_f64(y, ykind):  # pragma: no cover - overloaded below
    raise NotImplementedError


def pow_element(op, x, y, ykind, imin):  # pragma: no cover - overloaded below
    raise NotImplementedError


def _fix_flagged(op, xv, xkind, yv, ykind, ov):  # pragma: no cover - overloaded below
    raise NotImplementedError


def _scan_flagged(op, xv, xkind, yv, ykind):  # pragma: no cover - overloaded below
    raise NotImplementedError


def _fix_signs(op, xv, xkind, yv, ykind, ov):  # pragma: no cover - overloaded below
    raise NotImplementedError


def _chunk(buf, start, stride, n):  # pragma: no cover - overloaded below
    raise NotImplementedError


def _at(v, j):  # pragma: no cover - overloaded below
    raise NotImplementedError


def _block(v, s):  # pragma: no cover - overloaded below
    raise NotImplementedError


@helper_overload(exponent_as_f64)
def _exponent_as_f64(y, ykind):
    if isinstance(y, types.Integer) and y.bitwidth == 16 and not y.signed:

        def impl(y, ykind):
            if ykind == NATIVE:
                return types.float64(y)
            return types.float64(half_to_f32(y, ykind))

        return impl
    return lambda y, ykind: types.float64(y)


@helper_overload(_chunk)
def _chunk_impl(buf, start, stride, n):
    if not isinstance(buf, types.Array):
        return lambda buf, start, stride, n: buf  # a scalar exponent passes through

    def impl(buf, start, stride, n):
        if stride == 1:
            return buf[start : start + n]
        tmp = heap_array(n, buf)  # strided or broadcast: gather, so the loop is contiguous
        for j in range(n):
            tmp[j] = buf[start + j * stride]
        return tmp

    return impl


@helper_overload(_at)
def _at_impl(v, j):
    if isinstance(v, types.Array):
        return lambda v, j: v[j]
    return lambda v, j: v


@helper_overload(_block)
def _block_impl(v, s):
    """``v[s : s + BLOCK]`` of a chunk, or a scalar exponent itself.  Loops index the block
    from 0: ``v[s + j]`` would need numba's negative-index wraparound, which keeps LLVM from
    vectorizing."""
    if isinstance(v, types.Array):
        return lambda v, s: v[s : s + BLOCK]
    return lambda v, s: v


@helper(error_model="numpy")
def _int_pow(x, y, imin):
    """x ** y for int64 x and integer y (any width or signedness), by the documented rules."""
    if y < 0:
        if x == 1:
            return types.int64(1)
        if x == -1:
            return types.int64(-1) if (y & 1) != 0 else types.int64(1)
        if x == 0:
            return imin
        return types.int64(0)
    e = types.uint64(y)
    base = types.int64(x)
    result = types.int64(1)
    while e != 0:  # square-and-multiply; int64 products wrap modulo 2**64
        if e & types.uint64(1):
            result *= base
        base *= base
        e >>= types.uint64(1)
    return result


@helper(error_model="numpy")
def _int_ipow(x, n, imin):
    """x ** n for int64 x and |n| < 32 without branches (vectorizable), wrapping."""
    e = n if n >= 0 else -n
    r = pow_by_squaring(x, e, types.int64(1))
    odd_sign = types.int64(-1) if (e & 1) else types.int64(1)
    neg = types.int64(1) if x == 1 else (odd_sign if x == -1 else (imin if x == 0 else 0))
    return neg if n < 0 else r


@helper(error_model="numpy")
def _int_pow_float(x, yf, imin):
    """Integer base, float exponent: the float64 power truncated toward zero, else imin."""
    r = math.pow(types.float64(x), yf)
    lo = types.float64(imin)
    # trunc(r) >= lo  <=>  r > lo - 1, and trunc(r) < -lo  <=>  r < -lo; NaN fails both.
    # At int64's edge lo - 1 rounds to lo, which only sends r == lo to imin: the same value.
    if r > lo - 1.0 and r < -lo:
        return types.int64(r)  # float -> int conversion truncates toward zero
    return imin


@helper_overload(pow_element, inline="always")
def _pow_element(op, x, y, ykind, imin):
    """(value, ok) of one element; ok False sends the element to the libm slow path."""
    if not isinstance(op, types.IntegerLiteral):
        return None
    op = op.literal_value
    if isinstance(x, types.Integer):
        return _int_element(op, y)
    if x.bitwidth == 64:
        return _wide_element(op)
    return _narrow_element(op)


def _int_element(op, y):
    if op == SQUARE:
        return lambda op, x, y, ykind, imin: (types.int64(x) * types.int64(x), True)
    if op == CUBE:
        return lambda op, x, y, ykind, imin: (
            types.int64(x) * types.int64(x) * types.int64(x),
            True,
        )
    if op == IPOW:
        return lambda op, x, y, ykind, imin: (_int_ipow(types.int64(x), y, imin), True)
    if isinstance(y, types.Float):
        return lambda op, x, y, ykind, imin: (_int_pow_float(x, types.float64(y), imin), True)
    if y.bitwidth == 16 and not y.signed:  # uint16 data or half bits: decided at run time

        def impl_int_or_half(op, x, y, ykind, imin):
            if ykind == NATIVE:
                return _int_pow(types.int64(x), y, imin), True
            return _int_pow_float(x, exponent_as_f64(y, ykind), imin), True

        return impl_int_or_half
    return lambda op, x, y, ykind, imin: (_int_pow(types.int64(x), y, imin), True)


def _narrow_element(op):
    """float32 values (float32, float16, bfloat16 bases): one float32 operation where IEEE
    rounding (and, for the half types, Figueroa's double-rounding bound: 24 >= 2*11 + 2 bits)
    makes it correctly rounded, float64 arithmetic and one final rounding elsewhere."""
    if op == SQUARE:
        return lambda op, x, y, ykind, imin: (x * x, True)
    if op == CUBE:  # 72 bits rounded once to float64, then to the narrow type
        return lambda op, x, y, ykind, imin: (
            types.float64(x) * types.float64(x) * types.float64(x),
            True,
        )
    if op == SQRT:
        return lambda op, x, y, ykind, imin: (sqrt_narrow(x), True)
    if op == RECIP:
        return lambda op, x, y, ykind, imin: (np.float32(1.0) / x, True)
    if op == RSQRT:
        return lambda op, x, y, ykind, imin: (rsqrt_narrow(types.float64(x)), True)
    if op == IPOW:
        return lambda op, x, y, ykind, imin: (ipow_narrow(types.float64(x), y), True)
    return None  # GENERAL: ``_apply_narrow_general``


def _wide_element(op):
    """float64 bases: correctly rounded classes where one rounding is possible."""
    if op == SQUARE:
        return lambda op, x, y, ykind, imin: (x * x, True)
    if op == CUBE:
        return lambda op, x, y, ykind, imin: (cube_wide(x), True)
    if op == SQRT:
        return lambda op, x, y, ykind, imin: (sqrt_any(x), True)
    if op == RECIP:
        return lambda op, x, y, ykind, imin: (1.0 / x, True)
    if op == RSQRT:
        return lambda op, x, y, ykind, imin: (rsqrt_wide(x), True)
    return None  # GENERAL: the two-pass loop in ``_apply``


@helper_overload(_scan_flagged)
def _scan_flagged_impl(op, xv, xkind, yv, ykind):
    """``(signs, flagged)`` of a float32/half GENERAL chunk: whether a base is not positive
    (zero, negative or NaN: ``_fix_signs`` must run; half bases take signs inline, so always
    False for them), and whether an element may be one ``pow_narrow_abs`` leaves to libm.

    A separate scan over the chunk (still in L2): the flag inside the main loop slowed it.  The
    bases are scanned as integers, the unsigned min and max of ``|x|``'s bits and the OR of the
    sign bits, reductions LLVM always vectorizes; the float tests of ``pow_narrow_needs_libm``
    stayed scalar with a scalar exponent (the measurements: docs/design.md, "The fix-up
    pass").  ``flagged`` is conservative (a zero base sets it): ``_fix_flagged`` tests each
    element.  Other classes flag inside their loop (the float64 test needs the logarithm) or
    never: (False, False).
    """
    if not isinstance(op, types.IntegerLiteral):
        return None
    if op.literal_value != GENERAL or not _is_narrow(xv.dtype):
        return lambda op, xv, xkind, yv, ykind: (False, False)
    signs_inline = xv.dtype == types.uint16

    def impl(op, xv, xkind, yv, ykind):
        lo = _U32(0xFFFFFFFF)
        hi = _U32(0)
        sign = _U32(0)
        for j in range(xv.size):
            u = f32_as_u32(widen(xv[j], xkind))
            a = _U32(u & _U32(0x7FFFFFFF))
            lo = int_min(lo, a)
            hi = int_max(hi, a)
            sign = _U32(sign | u)
        signs = not signs_inline and (
            (sign & _F32_SIGN_BIT) != _U32(0) or lo == _U32(0) or hi > _F32_INF_BITS
        )
        flagged = lo < _F32_MIN_NORMAL_BITS or hi >= _F32_INF_BITS
        return signs, flagged or not _exponents_finite(yv, ykind)

    return impl


def _exponents_finite(yv, ykind):  # pragma: no cover - overloaded below
    raise NotImplementedError


@helper_overload(_exponents_finite)
def _exponents_finite_impl(yv, ykind):
    """Whether every exponent of a chunk (or the scalar one) is finite: float exponents by
    the max of their magnitudes' bits (a reduction that vectorizes, where the float test
    stays scalar), integers always, uint16 (data, or half bits) by value."""
    if not isinstance(yv, types.Array):
        return lambda yv, ykind: abs(exponent_as_f64(yv, ykind)) < math.inf
    dt = yv.dtype
    if isinstance(dt, types.Integer) and dt != types.uint16:
        return lambda yv, ykind: True
    if dt == types.float32:

        def impl32(yv, ykind):
            hi = _U32(0)
            for j in range(yv.size):
                hi = int_max(hi, _U32(f32_as_u32(yv[j]) & _U32(0x7FFFFFFF)))
            return hi < _F32_INF_BITS

        return impl32
    if dt == types.float64:

        def impl64(yv, ykind):
            hi = _U64(0)
            for j in range(yv.size):
                hi = int_max(hi, f64_as_u64(yv[j]) & _F64_ABS)
            return hi < _F64_INF_BITS

        return impl64

    def impl(yv, ykind):
        finite = True
        for j in range(yv.size):
            finite &= abs(exponent_as_f64(yv[j], ykind)) < math.inf
        return finite

    return impl


@helper_overload(_fix_signs)
def _fix_signs_impl(op, xv, xkind, yv, ykind, ov):
    """Second pass over a float32 GENERAL chunk whose bases are not all positive (as
    ``_scan_flagged`` found): zero bases and signs (``pow_narrow_sign``) applied to the stored
    ``|x|**y``, exactly (a factor of +-1 or NaN, or a constant); other classes: no-op."""
    if not isinstance(op, types.IntegerLiteral):
        return None
    if op.literal_value != GENERAL or xv.dtype != types.float32:  # halves: inline
        return lambda op, xv, xkind, yv, ykind, ov: None

    def impl(op, xv, xkind, yv, ykind, ov):
        for j in range(ov.size):
            m = types.float64(widen(ov[j], xkind))
            xw = types.float64(widen(xv[j], xkind))
            ov[j] = narrow(pow_narrow_sign(xw, exponent_as_f64(_at(yv, j), ykind), m), xkind, ov)

    return impl


def _is_narrow(dtype) -> bool:
    """float32, or uint16 bits of a half type (the only uint16 base)."""
    return isinstance(dtype, types.Float) and dtype.bitwidth == 32 or dtype == types.uint16


@helper_overload(_fix_flagged)
def _fix_flagged_impl(op, xv, xkind, yv, ykind, ov):
    """Second pass over a chunk with flagged elements: libm's pow for those (GENERAL floats
    only; the other classes never flag, and compile to nothing here)."""
    if not isinstance(op, types.IntegerLiteral):
        return None
    if op.literal_value != GENERAL or isinstance(xv.dtype, types.Integer) and xv.dtype.signed:
        return lambda op, xv, xkind, yv, ykind, ov: None
    wide = isinstance(xv.dtype, types.Float) and xv.dtype.bitwidth == 64
    needs_libm = pow_wide_needs_libm if wide else pow_narrow_needs_libm

    def impl(op, xv, xkind, yv, ykind, ov):
        for j in range(ov.size):
            xw = widen(xv[j], xkind)
            yw = exponent_as_f64(_at(yv, j), ykind)
            if needs_libm(xw, yw):
                ov[j] = narrow(math.pow(types.float64(xw), yw), xkind, ov)

    return impl


@njit(inline="always", error_model="numpy")
def _drive(
    op, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table, flags, stream
):
    """out.flat[i] = X[idx] ** Y[idx] over the broadcast (coalesced) ``shape``, class ``op``.

    Tasks are (row, chunk of the innermost axis) pairs, so both a single long row and many
    short rows split evenly.  The parallel region only calls ``_task``: a small parfor body
    keeps numba's parfor passes, a large part of the compile time, cheap.
    """
    nchunks = _chunks_per_row(shape)
    caller = call_state()
    for task in prange(out.size // shape[shape.size - 1] * nchunks):
        spread(caller)
        # int64: the gufunc's loop index is unsigned, and a second signature is a second compile
        t = types.int64(task)
        _task(
            op, t, nchunks, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin,
            table, flags, stream,
        )  # fmt: skip


@njit(inline="always", error_model="numpy")
def _chunks_per_row(shape):
    inner = shape[shape.size - 1]
    return (inner + CHUNK - 1) // CHUNK


@helper(error_model="numpy")
def _locate(task, nchunks, x_org, x_str, y_org, y_str, shape):
    """(x offset, y offset, output offset, length) of one (row, chunk) task's elements."""
    ndim = shape.size
    inner = shape[ndim - 1]
    row = task // nchunks
    j0 = (task - row * nchunks) * CHUNK
    n = int_min(inner, j0 + CHUNK) - j0
    xo = x_org
    yo = y_org
    rem = row
    for d in range(ndim - 2, -1, -1):
        idx = rem % shape[d]
        rem //= shape[d]
        xo += idx * x_str[d]
        yo += idx * y_str[d]
    return xo + j0 * x_str[ndim - 1], yo + j0 * y_str[ndim - 1], row * inner + j0, n


@helper(error_model="numpy")
def _task(
    op, task, nchunks, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table,
    flags, stream,
):  # fmt: skip
    """One (row, chunk) task: locate its operands, gather strided ones, apply the class (with
    ``stream``, writing the result past the caches where the class allows)."""
    xo, yo, oo, n = _locate(task, nchunks, x_org, x_str, y_org, y_str, shape)
    ov = out[oo : oo + n]
    inner_x, inner_y = x_str[shape.size - 1], y_str[shape.size - 1]
    if table.size != 0:
        _gather(x, xo, inner_x, y, table, ov)
        return
    xv = _chunk(x, xo, inner_x, n)
    yv = _chunk(y, yo, inner_y, n)
    if stream and _apply_streaming(op, xv, xkind, yv, ykind, out, oo, imin):
        return
    flag = _chunk_pass(op, xv, xkind, yv, ykind, ov, imin)
    if flag != _U8(0):
        flags[task] = flag


@njit(inline="always", error_model="numpy")
def _chunk_pass(op, xv, xkind, yv, ykind, ov, imin):
    """A contiguous chunk's results: the class's loops, then its fix-up passes, run now or
    left to ``pow_fixup``: the flag byte of those left (0 for none).  The same steps on the pool
    (``_task``) and on the calling thread (``pow_*_here``)."""
    bad = _apply(op, xv, xkind, yv, ykind, ov, imin)
    signs, flagged = _scan_flagged(op, xv, xkind, yv, ykind)
    return _fix_now_or_later(op, xv, xkind, yv, ykind, ov, signs, bad or flagged)


def _apply_streaming(op, xv, xkind, yv, ykind, out, oo, imin):
    raise NotImplementedError  # pragma: no cover - overloaded below


_LINE_OPS = {SQUARE: SQUARE_LINE, CUBE: CUBE_LINE, SQRT: SQRT_LINE, RECIP: RECIP_LINE}


@helper_overload(_apply_streaming, error_model="numpy")
def _apply_streaming_impl(op, xv, xkind, yv, ykind, out, oo, imin):
    """``out[oo : oo + n]`` = the chunk's results, its whole cache lines written by non-temporal
    stores (see ``streaming``), one line's worth of elements a step, read, computed and
    stored.  For the classes bound by memory whose results are one IEEE operation or wrapping
    products in the base's own type: squares and, of float32/float64, square roots and
    reciprocals; cubes of integers.  Returns True, or False, doing nothing, for every other
    class and type (and for a result at an address that is not a whole number of elements).

    Computing a block into a buffer in L1 and then copying it out by non-temporal stores gained
    almost nothing: the stores then come in bursts, no loads among them.  The price is a longer
    first compile of each class (the line loop's partial ends taken through the vector code
    instead cost as much), paid once per machine: the kernels stay in numba's on-disk cache.
    The measurements: docs/design.md, "Streaming stores" and "Compile time".
    """
    if not isinstance(op, types.IntegerLiteral):
        return None
    line_op = _LINE_OPS.get(op.literal_value)
    # (uint16 bases are half-type bits: no Pow version takes uint16 X)
    native = xv.dtype == out.dtype and xv.dtype != types.uint16
    if not native or line_op not in line_ops(xv.dtype):
        return lambda op, xv, xkind, yv, ykind, out, oo, imin: False
    item = xv.dtype.bitwidth // 8
    per = LINE // item

    def impl(op, xv, xkind, yv, ykind, out, oo, imin):
        off = line_misalignment(out, oo)
        if off % item != 0:
            return False
        n = xv.size
        head = int_min(n, ((LINE - off) % LINE) // item)
        lines = (n - head) // per
        tail = head + lines * per
        for k in range(lines):
            j = head + k * per
            power_line(xv, j, out, oo + j, line_op)
        # the partial lines at either end: plain stores (a loop of its own, not ``_apply``,
        # whose two more inlined copies took longer to compile)
        for i in range(n - tail + head):
            j = i if i < head else tail + i - head
            value, _ = pow_element(op, xv[j], _at(yv, j), ykind, imin)
            out[oo + j] = narrow(value, xkind, out)
        store_fence()
        return True

    return impl


def _fix_now_or_later(op, xv, xkind, yv, ykind, ov, signs, flagged):
    raise NotImplementedError  # pragma: no cover - overloaded below


@helper_overload(_fix_now_or_later)
def _fix_now_or_later_impl(op, xv, xkind, yv, ykind, ov, signs, flagged):
    """A chunk's fix-up passes: for float32 and float64 bases, and half bases under an array
    of exponents, left to ``pow_fixup`` (a flag byte per task), whose code, a large part of the
    GENERAL kernel's first compile, is then compiled only for data that needs it (zero,
    negative or special bases or exponents); the signs of float32 bases under a positive scalar
    exponent, cheap to compile, are fixed here (``_scalar_signs``).  Half bases under a scalar
    exponent run them here: their table is built from every base, special ones included.
    (Left to ``pow_fixup``, the first float16 ** float16 or bfloat16 ** bfloat16 call of a
    process is shorter: docs/design.md, "Compile time".)"""
    if not isinstance(op, types.IntegerLiteral):
        return None
    if (
        isinstance(xv.dtype, types.Float)
        or xv.dtype == types.uint16
        and isinstance(yv, types.Array)
    ):
        general = op.literal_value == GENERAL
        if general and xv.dtype == types.float32 and not isinstance(yv, types.Array):

            def scalar_signs(op, xv, xkind, yv, ykind, ov, signs, flagged):
                left = signs and not _scalar_signs(xv, yv, ov)
                return _U8(1 if left else 0) | _U8(2 if flagged else 0)

            return scalar_signs

        def later(op, xv, xkind, yv, ykind, ov, signs, flagged):
            return _U8(1 if signs else 0) | _U8(2 if flagged else 0)

        return later

    def now(op, xv, xkind, yv, ykind, ov, signs, flagged):
        if signs:
            _fix_signs(op, xv, xkind, yv, ykind, ov)
        if flagged:
            _fix_flagged(op, xv, xkind, yv, ykind, ov)
        return _U8(0)

    return now


@helper(error_model="numpy")
def _scalar_signs(xv, y, ov):
    """``_fix_signs`` for float32 bases and a finite scalar exponent y > 0, run in the chunk's
    task while it is in cache (``pow_fixup`` would read it all again, and negative bases would
    cost far more than positive ones).
    The rules are ``pow_narrow_sign``'s, whose tests on y the scalar exponent makes loop
    invariants (``narrow_sign_factors``), applied in float32: a zero base's result is 0 (y > 0),
    a negative base's is multiplied by its factor, exactly.  (Through ``pow_narrow_sign`` in
    float64, widening each base and result, the pass was a large part of the call; the
    measurements: docs/design.md, "The fix-up pass".)  False, doing nothing, for other
    exponents (``pow_fixup`` then runs)."""
    if not (y > 0.0 and y < math.inf):
        return False
    zero_factor, factor = narrow_sign_factors(y)
    for j in range(ov.size):
        x = xv[j]
        zero = x == np.float32(0.0)
        m = np.float32(0.0) if zero else ov[j]
        f = zero_factor if zero else factor
        ov[j] = m * f if f32_as_u32(x) >= _F32_SIGN_BIT else m
    return True


@helper(error_model="numpy")
def _fix_task(task, nchunks, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, flag):
    """The fix-up passes ``_task`` left to ``pow_fixup``: 1 signs, 2 libm elements."""
    xo, yo, oo, n = _locate(task, nchunks, x_org, x_str, y_org, y_str, shape)
    ov = out[oo : oo + n]
    xv = _chunk(x, xo, x_str[shape.size - 1], n)
    yv = _chunk(y, yo, y_str[shape.size - 1], n)
    _fix_chunk(xv, xkind, yv, ykind, ov, flag)


@njit(inline="always", error_model="numpy")
def _fix_chunk(xv, xkind, yv, ykind, ov, flag):
    if flag & _U8(1):
        _fix_signs(GENERAL, xv, xkind, yv, ykind, ov)
    if flag & _U8(2):
        _fix_flagged(GENERAL, xv, xkind, yv, ykind, ov)


def _gather(x, start, stride, y, table, ov):  # pragma: no cover - overloaded below
    raise NotImplementedError


@helper_overload(_gather, error_model="numpy")
def _gather_impl(x, start, stride, y, table, ov):
    """ov[j] = table[x[start + j * stride]]: a half-type base's bits mapped through its table.
    Other bases, and array exponents, never get a table and compile to nothing here (the
    gather's loops would lengthen their kernels' first compile)."""
    if x.dtype != types.uint16 or isinstance(y, types.Array):
        return lambda x, start, stride, y, table, ov: None

    def impl(x, start, stride, y, table, ov):
        n = ov.size
        if stride != 1:
            for j in range(n):
                ov[j] = table[x[start + j * stride]]
            return
        # Four indices per load: one 8-byte load and shifts instead of four 2-byte loads make
        # the loop faster (docs/design.md, "Half-type tables"); the gather itself stays scalar
        # (LLVM's vectorized gather and AVX-512's vpgatherdd were no faster).  Unsigned
        # positions: numba's wraparound of negative indices cost a compare and a select per
        # store.
        xv = x[start : start + n]
        for k in range(n // 4):
            j = types.uint64(4 * k)
            w = load_u16x4(xv, j)
            ov[j] = table[w & 0xFFFF]
            ov[j + 1] = table[(w >> 16) & 0xFFFF]
            ov[j + 2] = table[(w >> 32) & 0xFFFF]
            ov[j + 3] = table[w >> 48]
        for j in range(n - n % 4, n):
            ov[j] = table[xv[j]]

    return impl


def _apply(op, xv, xkind, yv, ykind, ov, imin):  # pragma: no cover - overloaded below
    raise NotImplementedError


@helper_overload(_apply, error_model="numpy")
def _apply_impl(op, xv, xkind, yv, ykind, ov, imin):
    """ov[j] = xv[j] ** yv[j] over a contiguous chunk: the loops LLVM vectorizes.  Returns
    whether an element was flagged for the slow path."""
    if not isinstance(op, types.IntegerLiteral):
        return None
    if op.literal_value == GENERAL and xv.dtype == types.float64:
        return _apply_wide_general
    if op.literal_value == GENERAL and xv.dtype == types.uint16:
        return _apply_half_general
    if op.literal_value == GENERAL and xv.dtype == types.float32:
        return _apply_narrow_general
    return _apply_elementwise


def _apply_elementwise(op, xv, xkind, yv, ykind, ov, imin):
    bad = False
    for j in range(ov.size):
        value, ok = pow_element(op, widen(xv[j], xkind), _at(yv, j), ykind, imin)
        ov[j] = narrow(value, xkind, ov)
        bad |= not ok
    return bad


# float32 GENERAL chunks go in blocks of BLOCK elements, in two loops: t = y log2|x| into a
# stack buffer (in L1), then 2**t.  In one loop each element's dependency chain, a division
# and two polynomials, was so long that the out-of-order window held too few elements to keep
# the core busy; apart, each chain is half as long.  Full blocks have a constant trip count, so
# LLVM unrolls each loop by two and loads each constant once per 8 elements.  The price is a
# longer first (cold-cache) compile of the kernel.  The measurements: docs/design.md, "Float
# arithmetic without libm" and "Compile time".
BLOCK = 1024


def _apply_narrow_general(op, xv, xkind, yv, ykind, ov, imin):
    # |x|**y only: ``_fix_signs`` and ``_scan_flagged`` find the other elements more cheaply.
    tb = stack_array(BLOCK, 0.0)
    full = ov.size - ov.size % BLOCK
    for s in range(0, full, BLOCK):
        _narrow_block(xv, xkind, yv, ykind, ov, s, BLOCK, tb)
    _narrow_block(xv, xkind, yv, ykind, ov, full, ov.size - full, tb)
    return False


def _apply_half_general(op, xv, xkind, yv, ykind, ov, imin):
    # Half bases take the sign rules inline (``_fix_signs`` skips them), in one loop: with the
    # result narrowed to a half type, LLVM vectorizes it better than the bare |x|**y one, and
    # than float32's two loops (docs/design.md, "Float arithmetic without libm").
    for j in range(ov.size):
        xw = widen(xv[j], xkind)
        yw = exponent_as_f64(_at(yv, j), ykind)
        ov[j] = narrow(pow_narrow_sign(types.float64(xw), yw, pow_narrow_abs(xw, yw)), xkind, ov)
    return False


@njit(inline="always", error_model="numpy")
def _narrow_block(xv, xkind, yv, ykind, ov, s, n, tb):
    """ov[s : s + n] = |x|**y for float32 bases, n <= BLOCK."""
    xs, ys, os = _block(xv, s), _block(yv, s), _block(ov, s)
    for j in range(n):
        tb[j] = narrow_log_term(widen(xs[j], xkind), exponent_as_f64(_at(ys, j), ykind))
    _narrow_exp2_block(tb, os, n)


def _narrow_exp2_block(tb, os, n):  # pragma: no cover - overloaded below
    raise NotImplementedError


@helper_overload(_narrow_exp2_block, inline="always")
def _narrow_exp2_block_impl(tb, os, n):
    """os[j] = 2**tb[j] rounded to float32, j < n.  On AVX-512 by ``narrow_exp2_vectors`` (a
    16-entry table by register permutes, a polynomial of degree 6 instead of 8: faster, see
    docs/design.md); else ``narrow_exp2``, which AVX2, without a fast permute of 16 doubles,
    keeps table-free."""
    if vector_bits() == 512:
        return lambda tb, os, n: narrow_exp2_vectors(tb, os, n)

    def plain(tb, os, n):
        for j in range(n):
            os[j] = np.float32(narrow_exp2(tb[j]))

    return plain


def _apply_wide_general(op, xv, xkind, yv, ykind, ov, imin):
    # Blocks of BLOCK elements, each in two loops: log into the output and a stack buffer
    # (in L1), then exp.  In one loop, LLVM's cost model turned vectorization down (four
    # table lookups that AVX2 cannot gather quickly); apart, both loops vectorize and run
    # faster.  The buffer is small on purpose: a whole chunk's (128 KiB) made LLVM's compile far
    # longer.  An array of exponents is read only by the exp loop, so the hardware's stream
    # prefetch loses it during each log loop: each block first asks for the next block's
    # exponents in L2, bit-identical and faster on the Intel Xeon measured.  (Asking for the bases
    # too, or for float32 exponents, was slower.)  Not on AMD Zen, where the hint made one thread
    # slightly slower.  One call site, with the block's length a variable: a call for the whole
    # blocks with the constant BLOCK compiled ``_wide_block`` a second time, a longer first
    # float64 call, and ran no faster.  The measurements: docs/design.md, "Float arithmetic
    # without libm" and "Compile time".
    low = stack_array(BLOCK, 0.0)
    bad = False
    for s in range(0, ov.size, BLOCK):
        _prefetch_block(yv, s + BLOCK)
        bad |= _wide_block(xv, yv, ykind, ov, s, int_min(BLOCK, ov.size - s), low)
    return bad


def _prefetch_block(v, s):  # pragma: no cover - overloaded below
    raise NotImplementedError


@helper_overload(_prefetch_block)
def _prefetch_block_impl(v, s):
    """Ask for ``v[s : s + BLOCK]`` (what of it exists) in L2; nothing for a scalar, nor on
    AMD Zen (see ``_apply_wide_general``)."""
    if not isinstance(v, types.Array) or amd_zen():
        return lambda v, s: None

    def impl(v, s):
        n = int_min(BLOCK, v.size - s)
        if n > 0:
            prefetch_rows_for_read(v, s, 1, 0, n)

    return impl


@helper(error_model="numpy")
def _wide_block(xv, yv, ykind, ov, s, n, low):
    """ov[s : s + n] = x ** y for float64 bases, n <= BLOCK; whether an element was flagged.

    The common block has no zero, subnormal, infinite or NaN base and no infinite or NaN
    exponent, so neither the subnormal scaling nor the C99 rules beyond a negative base's sign
    are paid per element (they would slow the exp loop markedly: docs/design.md, "Float
    arithmetic without libm").  The loops find out as they go (the bits of |x| in
    [2**52, 0x7FF << 52), and of |y| below 0x7FF << 52: unsigned min and max, which
    vectorize), and only a block that has such an element is computed again with them.  (A
    scan of each chunk first, as it came from memory and before any arithmetic, cost more.)
    """
    xs, ys, os = _block(xv, s), _block(yv, s), _block(ov, s)
    lo = _U64(0xFFFFFFFFFFFFFFFF)
    hi = _U64(0)
    for j in range(n):
        b = f64_as_u64(xs[j]) & _F64_ABS
        lo = int_min(lo, b)
        hi = int_max(hi, b)
        os[j], low[j] = log_wide_normal(xs[j])
    if lo >= _F64_MIN_NORMAL_BITS and hi < _F64_INF_BITS:
        bad, finite = _clean_exp(xs, ys, ykind, os, n, low)
        if finite:
            return bad
    for j in range(n):
        os[j], low[j] = log_wide(xs[j])
    bad = False
    for j in range(n):
        value, ok = pow_wide_finish(xs[j], exponent_as_f64(_at(ys, j), ykind), os[j], low[j])
        os[j] = value
        bad |= not ok
    return bad


def _clean_exp(xs, ys, ykind, os, n, low):  # pragma: no cover - overloaded below
    raise NotImplementedError


# (A call LLVM inlines: inlined by numba, it was lowered twice, a longer first compile of the
# float64 kernel.)
@helper_overload(_clean_exp)
def _clean_exp_impl(xs, ys, ykind, os, n, low):
    """os[j] = x ** y from log|x| = os[j] + low[j] for normal finite bases
    (``exp_wide_of_log``); (whether an element was flagged, whether every exponent is finite:
    if not, the results are garbage).  On AVX-512, for a scalar exponent or float64 ones, by
    ``exp_wide_vectors``: the same arithmetic with the table factors by register permutes
    in one loop, against this loop for same-shape exponents and, for a scalar one, three
    loops that kept the gathers out with two scratch buffers, faster than both (docs/design.md,
    "Float arithmetic without libm").  Elsewhere, and for exponents of other types,
    the loop LLVM vectorizes, gathering the table entries."""
    if vector_bits() == 512:
        if not isinstance(ys, types.Array):
            return lambda xs, ys, ykind, os, n, low: exp_wide_vectors(
                xs, exponent_as_f64(ys, ykind), os, low, n
            )
        if ys.dtype == types.float64:
            return lambda xs, ys, ykind, os, n, low: exp_wide_vectors(xs, ys, os, low, n)

    def fused(xs, ys, ykind, os, n, low):
        bad = False
        ymax = _U64(0)
        for j in range(n):
            y = exponent_as_f64(_at(ys, j), ykind)
            ymax = int_max(ymax, f64_as_u64(y) & _F64_ABS)
            value, ok = exp_wide_of_log(xs[j], y, os[j], low[j])
            os[j] = value
            bad |= not ok
        return bad, ymax < _F64_INF_BITS

    return fused


# One kernel per class; all share the signature
# (x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table, flags, stream).
# ``flags`` is empty, or for GENERAL one byte per task that ``pow_fixup`` reads; ``stream``
# asks the classes bound by memory to write the result past the caches.  ``table`` is empty,
# or for a half-type base (uint16 bits) the class's results for all 65,536 bases: then the
# kernel maps X through it instead of computing.  The gather lives in every class's kernel,
# so it costs no compilation of its own (a separate parallel kernel made the first call much
# longer).
@kernel(parallel=True, error_model="numpy")
def pow_square(x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table, flags,
               stream):  # fmt: skip
    """x ** 2."""
    _drive(SQUARE, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table,
           flags, stream)  # fmt: skip


@kernel(parallel=True, error_model="numpy")
def pow_cube(x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table, flags,
             stream):  # fmt: skip
    """x ** 3."""
    _drive(CUBE, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table,
           flags, stream)  # fmt: skip


@kernel(parallel=True, error_model="numpy")
def pow_sqrt(x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table, flags,
             stream):  # fmt: skip
    """x ** 0.5."""
    _drive(SQRT, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table,
           flags, stream)  # fmt: skip


@kernel(parallel=True, error_model="numpy")
def pow_recip(x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table, flags,
              stream):  # fmt: skip
    """x ** -1."""
    _drive(RECIP, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table,
           flags, stream)  # fmt: skip


@kernel(parallel=True, error_model="numpy")
def pow_rsqrt(x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table, flags,
              stream):  # fmt: skip
    """x ** -0.5."""
    _drive(RSQRT, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table,
           flags, stream)  # fmt: skip


@kernel(parallel=True, error_model="numpy")
def pow_ipow(x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table, flags,
             stream):  # fmt: skip
    """x ** n for a scalar int64 n with |n| < IPOW_LIMIT."""
    _drive(IPOW, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table,
           flags, stream)  # fmt: skip


@kernel(parallel=True, error_model="numpy")
def pow_general(x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table, flags,
                stream):  # fmt: skip
    """x ** y for any exponent: a scalar or a strided array."""
    _drive(GENERAL, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table,
           flags, stream)  # fmt: skip


@kernel(parallel=True, error_model="numpy")
def pow_fixup(x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, imin, table, flags,
              stream):  # fmt: skip
    """After ``pow_general`` on float32/float64 bases: the signs and libm elements of the tasks
    it flagged (nonzero ``flags``); compiled on first need."""
    nchunks = _chunks_per_row(shape)
    caller = call_state()
    for task in prange(flags.size):
        spread(caller)
        t = types.int64(task)
        if flags[t] != _U8(0):
            _fix_task(
                t, nchunks, x, x_org, x_str, xkind, y, y_org, y_str, ykind, out, shape, flags[t]
            )


# --- The calling thread's kernels -----------------------------------------------------------
# Small calls run here, without waking the pool: a parallel launch costs more than their work
# (where the sizes cross over: ``tuning.POW_HERE_MAX``).  One chunk of at most CHUNK elements,
# contiguous: ``x`` and ``out`` 1-D of one length, ``y`` the same or a scalar (the plan copies
# any other layout of a small call into that form, the same elements).  The chunk takes the
# pool's steps (``_chunk_pass``), so results are bit for bit the pool's.  Few arguments, as a
# numba call costs by its arguments.  A kernel returns the chunk's flag byte: nonzero, the
# caller runs ``pow_fixup_here`` with it.


@kernel(error_model="numpy")
def pow_square_here(x, xkind, y, ykind, out, imin):
    return _chunk_pass(SQUARE, x, xkind, y, ykind, out, imin)


@kernel(error_model="numpy")
def pow_cube_here(x, xkind, y, ykind, out, imin):
    return _chunk_pass(CUBE, x, xkind, y, ykind, out, imin)


@kernel(error_model="numpy")
def pow_sqrt_here(x, xkind, y, ykind, out, imin):
    return _chunk_pass(SQRT, x, xkind, y, ykind, out, imin)


@kernel(error_model="numpy")
def pow_recip_here(x, xkind, y, ykind, out, imin):
    return _chunk_pass(RECIP, x, xkind, y, ykind, out, imin)


@kernel(error_model="numpy")
def pow_rsqrt_here(x, xkind, y, ykind, out, imin):
    return _chunk_pass(RSQRT, x, xkind, y, ykind, out, imin)


@kernel(error_model="numpy")
def pow_ipow_here(x, xkind, y, ykind, out, imin):
    return _chunk_pass(IPOW, x, xkind, y, ykind, out, imin)


@kernel(error_model="numpy")
def pow_general_here(x, xkind, y, ykind, out, imin):
    return _chunk_pass(GENERAL, x, xkind, y, ykind, out, imin)


@kernel(error_model="numpy")
def pow_fixup_here(x, xkind, y, ykind, out, flag):
    """``pow_fixup`` of a calling thread's kernel that returned the nonzero ``flag``."""
    _fix_chunk(x, xkind, y, ykind, out, flag)


#: The calling thread's kernel of each pool kernel.
HERE = {
    pow_square: pow_square_here,
    pow_cube: pow_cube_here,
    pow_sqrt: pow_sqrt_here,
    pow_recip: pow_recip_here,
    pow_rsqrt: pow_rsqrt_here,
    pow_ipow: pow_ipow_here,
    pow_general: pow_general_here,
}
