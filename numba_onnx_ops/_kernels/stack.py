"""Fixed-size scratch on the stack for kernels: no allocation, and no aliasing doubts."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


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
