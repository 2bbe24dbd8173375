"""Integer ``min`` and ``max`` for the Pow kernels.

numba (from 0.61 on) implements the builtins ``min`` and ``max`` as functions that it compiles
for each combination of argument types on first use in a process, each with a Python wrapper
and machine code of its own, in the first Pow kernel's compile.  These two emit the compare
and select in place.  Integers only: the builtins' NaN rules stay with them.  The MatMul
kernels keep the builtins: with these in their place, the int32 kernel for small products
(compiled with LLVM's SLP vectorizer) ran many times slower, and so it did with a conditional
expression that numba inlines (the measurements: docs/design.md, "Integer min and max").
"""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic


def _select(typingctx, a, b, op):
    common = typingctx.unify_types(a, b)
    if not isinstance(common, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        x = context.cast(builder, args[0], signature.args[0], common)
        y = context.cast(builder, args[1], signature.args[1], common)
        compare = builder.icmp_signed if common.signed else builder.icmp_unsigned
        return builder.select(compare(op, x, y), x, y)

    return common(a, b), codegen


@intrinsic
def int_min(typingctx, a, b):
    """The smaller of two integers, in their common type."""
    return _select(typingctx, a, b, "<")


@intrinsic
def int_max(typingctx, a, b):
    """The larger of two integers, in their common type."""
    return _select(typingctx, a, b, ">")
