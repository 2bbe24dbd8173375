"""Results too large for the caches, written past them with non-temporal stores.

A plain store to a line that is not in the cache first reads the line from memory (a read for
ownership), so a result written once costs its bytes twice in memory traffic, and a memory-bound
kernel (x ** 2, integer cubes) runs at two thirds of what the memory could do.  A non-temporal
store writes a whole 64-byte line without reading it; the line is not kept in the caches,
which only pays when the result would not have stayed there anyway.
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LINE = 64  # bytes in a cache line, and in one full AVX-512 store
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic
def line_misalignment(typingctx, arr, index):
    """The address of ``arr[index]`` modulo ``LINE``."""
    if not (isinstance(arr, types.Array) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        at = builder.gep(data, [context.cast(builder, args[1], signature.args[1], types.int64)])
        return builder.and_(builder.ptrtoint(at, i64), ir.Constant(i64, LINE - 1))

    return types.int64(arr, index), codegen


@intrinsic
def power_line(typingctx, x, xi, out, oi, power):
    """The ``LINE`` bytes of ``out`` from element ``oi`` (a line-aligned address) =
    ``x[xi + j] ** power`` for each of their elements, read from ``x`` at any address and written
    by one non-temporal store.  ``power`` is a literal 2 or 3; the products are ``x``'s own
    arithmetic (integers wrap; floats only square, a single rounding)."""
    if not (isinstance(x, types.Array) and isinstance(out, types.Array) and x.dtype == out.dtype):
        return None
    if not (isinstance(power, types.IntegerLiteral) and power.literal_value in (2, 3)):
        return None
    if not isinstance(x.dtype, (types.Float, types.Integer)):
        return None
    floating = isinstance(x.dtype, types.Float)
    if floating and power.literal_value != 2:
        return None

    def codegen(context, builder, signature, args):
        item = context.get_abi_sizeof(context.get_data_type(x.dtype))
        vt = ir.VectorType(context.get_value_type(x.dtype), LINE // item)

        def pointer(i, j):
            data = context.make_array(signature.args[i])(context, builder, args[i]).data
            index = context.cast(builder, args[j], signature.args[j], types.int64)
            return builder.bitcast(builder.gep(data, [index]), vt.as_pointer())

        v = builder.load(pointer(0, 1), align=item)
        mul = builder.fmul if floating else builder.mul
        r = mul(v, v)
        if power.literal_value == 3:
            r = mul(r, v)
        store = builder.store(r, pointer(2, 3), align=LINE)
        flag = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        store.set_metadata("nontemporal", flag)
        return context.get_dummy_value()

    return types.void(x, xi, out, oi, power), codegen


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
