"""Fixed-size scratch on the stack for kernels: no allocation, and no aliasing doubts."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array


@intrinsic
def stack_buffer(typingctx, n, proto):
    """A pointer to ``n`` (a compile-time constant) uninitialised elements on the stack, of
    ``proto``'s dtype (an array) or type (a scalar); wrap it with ``carray``.

    Indexed by constants after unrolling, a stack buffer is promoted to registers; a heap
    array never is, since LLVM cannot prove it does not alias the kernel's other arrays.
    """
    if not isinstance(n, types.IntegerLiteral):
        return None
    count = n.literal_value
    dtype = proto.dtype if isinstance(proto, types.Array) else proto

    def codegen(context, builder, signature, args):
        elem = context.get_value_type(dtype)
        buf = cgutils.alloca_once(builder, ir.ArrayType(elem, count))
        return builder.bitcast(buf, elem.as_pointer())

    return types.CPointer(dtype)(n, proto), codegen


@intrinsic
def stack_array(typingctx, n, proto):
    """A 1-D array of ``n`` (a compile-time constant) uninitialised elements on the stack of
    the function it is compiled into, of ``proto``'s dtype (an array) or type (a scalar).

    ``carray(stack_buffer(n, proto), (n,))`` without ``carray``, whose implementation numba
    compiles (with a Python wrapper and machine code of its own) for each signature on first
    use: 0.04-0.08 s of a kernel's first compile.  The array owns nothing and must not
    outlive that function's frame.
    """
    if not isinstance(n, types.IntegerLiteral):
        return None
    count = n.literal_value
    dtype = proto.dtype if isinstance(proto, types.Array) else proto
    array_type = types.Array(dtype, 1, "C")

    def codegen(context, builder, signature, args):
        elem = context.get_value_type(dtype)
        buf = cgutils.alloca_once(builder, ir.ArrayType(elem, count))
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(elem))
        array = make_array(array_type)(context, builder)
        populate_array(
            array,
            data=builder.bitcast(buf, elem.as_pointer()),
            shape=[context.get_constant(types.intp, count)],
            strides=[itemsize],
            itemsize=itemsize,
            meminfo=None,
        )
        return array._getvalue()

    return array_type(n, proto), codegen
