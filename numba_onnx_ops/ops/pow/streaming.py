"""Results too large for the caches, written past them with non-temporal stores.

A plain store to a line that is not in the cache first reads the line from memory (a read for
ownership), so a result written once costs its bytes twice in memory traffic, and a
memory-bound kernel (x ** 2, x ** 0.5, integer cubes) runs at two thirds of what the memory
could do.  A non-temporal store writes a whole 64-byte line without reading it; the line is not
kept in the caches, which only pays when the result would not have stayed there anyway.
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...runtime.vectors import LINE

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


# What ``power_line`` computes: C99's ``pow(x, y)`` for y = 2, 3, 0.5 and -1, as one IEEE
# operation (or two multiplications) in the base's own arithmetic.
SQUARE_LINE, CUBE_LINE, SQRT_LINE, RECIP_LINE = range(4)


def line_ops(dtype: types.Type) -> tuple[int, ...]:
    """The operations ``power_line`` has for elements of numba type ``dtype``."""
    if dtype in (types.float32, types.float64):
        return SQUARE_LINE, SQRT_LINE, RECIP_LINE
    if isinstance(dtype, types.Integer):
        return SQUARE_LINE, CUBE_LINE
    return ()


@intrinsic
def power_line(typingctx, x, xi, out, oi, op):
    """The ``LINE`` bytes of ``out`` from element ``oi`` (a line-aligned address) =
    ``pow(x[xi + j], y)`` for each of their elements, read from ``x`` at any address and written
    by one non-temporal store.  ``op`` (a literal) picks y: ``SQUARE_LINE`` (integers wrap,
    floats round once), ``CUBE_LINE`` (integers only: two float roundings would not be one),
    ``SQRT_LINE`` (IEEE sqrt, with C99's +0 for -0 and +inf for -inf) or ``RECIP_LINE``
    (``1 / x``), the last two for floats only."""
    if not (isinstance(x, types.Array) and isinstance(out, types.Array) and x.dtype == out.dtype):
        return None
    if not (isinstance(op, types.IntegerLiteral) and op.literal_value in line_ops(x.dtype)):
        return None
    code = op.literal_value
    floating = isinstance(x.dtype, types.Float)

    def codegen(context, builder, signature, args):
        item = context.get_abi_sizeof(context.get_data_type(x.dtype))
        ft = context.get_value_type(x.dtype)
        vt = ir.VectorType(ft, LINE // item)

        def pointer(i, j):
            data = context.make_array(signature.args[i])(context, builder, args[i]).data
            index = context.cast(builder, args[j], signature.args[j], types.int64)
            return builder.bitcast(builder.gep(data, [index]), vt.as_pointer())

        def splat(value):
            return ir.Constant(vt, [ir.Constant(ft, value)] * vt.count)

        v = builder.load(pointer(0, 1), align=item)
        mul = builder.fmul if floating else builder.mul
        if code == SQUARE_LINE:
            r = mul(v, v)
        elif code == CUBE_LINE:
            r = mul(mul(v, v), v)
        elif code == RECIP_LINE:
            r = builder.fdiv(splat(1.0), v)
        else:
            name = f"llvm.sqrt.v{vt.count}f{8 * item}"
            sqrt = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt]), name)
            r = builder.fadd(builder.call(sqrt, [v]), splat(0.0))  # -0 -> +0
            minus_inf = builder.fcmp_ordered("==", v, splat(float("-inf")))
            r = builder.select(minus_inf, splat(float("inf")), r)
        store = builder.store(r, pointer(2, 3), align=LINE)
        flag = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        store.set_metadata("nontemporal", flag)
        return context.get_dummy_value()

    return types.void(x, xi, out, oi, op), codegen


@intrinsic
def store_fence(typingctx):
    """Order the non-temporal stores made so far before any later store of this thread
    (``sfence`` on x86, a full fence elsewhere), so that whoever synchronizes with the thread
    afterwards sees them."""

    def codegen(context, builder, signature, args):
        if _X86:
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence"
            )
            builder.call(fn, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen
