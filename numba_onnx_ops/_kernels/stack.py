"""Fixed-size scratch on the stack for kernels: no allocation, and no aliasing doubts."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array


def _count_and_dtype(n, proto):
    """(element count, element type) of a scratch request, or None if ``n`` is not a literal."""
    if not isinstance(n, types.IntegerLiteral):
        return None
    return n.literal_value, proto.dtype if isinstance(proto, types.Array) else proto


def _alloca(context, builder, dtype, count):
    """A pointer to ``count`` uninitialised ``dtype`` elements in the current function's frame."""
    elem = context.get_value_type(dtype)
    buf = cgutils.alloca_once(builder, ir.ArrayType(elem, count))
    return builder.bitcast(buf, elem.as_pointer())


@intrinsic
def stack_buffer(typingctx, n, proto):
    """A pointer to ``n`` (a compile-time constant) uninitialised elements on the stack, of
    ``proto``'s dtype (an array) or type (a scalar); wrap it with ``carray``.

    Indexed by constants after unrolling, a stack buffer is promoted to registers; a heap
    array never is, since LLVM cannot prove it does not alias the kernel's other arrays.
    """
    request = _count_and_dtype(n, proto)
    if request is None:
        return None
    count, dtype = request

    def codegen(context, builder, signature, args):
        return _alloca(context, builder, dtype, count)

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
    request = _count_and_dtype(n, proto)
    if request is None:
        return None
    count, dtype = request
    array_type = types.Array(dtype, 1, "C")

    def codegen(context, builder, signature, args):
        itemsize = context.get_constant(
            types.intp, context.get_abi_sizeof(context.get_value_type(dtype))
        )
        array = make_array(array_type)(context, builder)
        populate_array(
            array,
            data=_alloca(context, builder, dtype, count),
            shape=[context.get_constant(types.intp, count)],
            strides=[itemsize],
            itemsize=itemsize,
            meminfo=None,
        )
        return array._getvalue()

    return array_type(n, proto), codegen
