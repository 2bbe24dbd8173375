"""Bit-level conversions for float16 and bfloat16 inside numba kernels, and the codes that
tell a kernel how to read an array's elements.

Numba has no float16 arithmetic on the CPU, so half data travels as uint16 bits.  float16 goes
through LLVM's ``half`` type: ``fpext``/``fptrunc`` lower to F16C's ``vcvtph2ps``/``vcvtps2ph``
on this CPU, vectorized by LLVM.  bfloat16 is the top half of a float32, so it is bit shifting.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .jit import helper

# How a kernel sees an array's elements. Half types travel as their uint16 bits (numba has no
# float16 arithmetic on the CPU); the kernels convert them in registers.  NATIVE means "the
# numba type of the array is the value type".  These codes are runtime arguments, so half types
# share the uint16 specialization instead of multiplying compilations.
NATIVE = 0
F16 = 1
BF16 = 2


@intrinsic
def _f16_bits_to_f32(typingctx, bits):
    sig = types.float32(types.uint16)

    def codegen(context, builder, signature, args):
        half = builder.bitcast(args[0], ir.HalfType())
        return builder.fpext(half, ir.FloatType())

    return sig, codegen


@intrinsic
def _f32_to_f16_bits(typingctx, value):
    sig = types.uint16(types.float32)

    def codegen(context, builder, signature, args):
        half = builder.fptrunc(args[0], ir.HalfType())
        return builder.bitcast(half, ir.IntType(16))

    return sig, codegen


@intrinsic
def f32_as_u32(typingctx, value):
    """Reinterpret a float32's bits as uint32."""
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


@intrinsic
def u32_as_f32(typingctx, value):
    """Reinterpret uint32 bits as a float32."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


@intrinsic
def f64_as_u64(typingctx, value):
    """Reinterpret a float64's bits as uint64."""
    sig = types.uint64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return sig, codegen


@intrinsic
def u64_as_f64(typingctx, value):
    """Reinterpret uint64 bits as a float64."""
    sig = types.float64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


@intrinsic
def load_u16x4(typingctx, arr, i):
    """``arr[i : i + 4]`` of a uint16 array as one uint64 (``arr[i]`` in the low bits), by one
    unaligned load; the caller keeps ``i + 4 <= arr.size``."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.uint16):
        return None
    sig = types.uint64(arr, types.intp)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        ptr = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(ptr, align=2)

    return sig, codegen


@helper()
def f16_to_f32(bits):
    """float16 bits -> float32 (exact)."""
    return _f16_bits_to_f32(bits)


@helper()
def bf16_to_f32(bits):
    """bfloat16 bits -> float32 (exact)."""
    return u32_as_f32(types.uint32(bits) << types.uint32(16))


@helper()
def f32_to_f16(value):
    """float32 -> float16 bits, rounded to nearest even (IEEE conversion)."""
    return _f32_to_f16_bits(value)


@helper()
def f32_to_bf16(value):
    """float32 -> bfloat16 bits, rounded to nearest even; NaN stays a (quiet) NaN."""
    bits = f32_as_u32(value)
    if (bits & types.uint32(0x7FFFFFFF)) > types.uint32(0x7F800000):
        return types.uint16((bits >> types.uint32(16)) | types.uint32(0x0040))
    rounding = types.uint32(0x7FFF) + ((bits >> types.uint32(16)) & types.uint32(1))
    return types.uint16((bits + rounding) >> types.uint32(16))


@helper()
def f64_to_f32_odd(value):
    """float64 -> float32 rounded to odd.

    Rounding to odd first and to nearest afterwards gives the correctly rounded result of the
    second, narrower format when it has at least two fewer significand bits (float16: 11,
    bfloat16: 8, float32: 24), so a float64 result reaches a half type with a single rounding.
    """
    t = types.float32(value)
    if types.float64(t) == value or value != value:
        return t
    bits = f32_as_u32(t)
    if abs(types.float64(t)) > abs(value):
        bits -= types.uint32(1)  # step toward zero: |t| was rounded up (inf becomes FLT_MAX)
    return u32_as_f32(bits | types.uint32(1))


@helper()
def half_to_f32(bits, kind):
    """Half bits of the given kind (F16 or BF16) -> float32."""
    if kind == BF16:
        return bf16_to_f32(bits)
    return f16_to_f32(bits)


@helper()
def f32_to_half(value, kind):
    """float32 -> half bits of the given kind (F16 or BF16), rounded to nearest even."""
    if kind == BF16:
        return f32_to_bf16(value)
    return f32_to_f16(value)


@helper()
def f64_to_half(value, kind):
    """float64 -> half bits of the given kind, correctly rounded (one rounding)."""
    return f32_to_half(f64_to_f32_odd(value), kind)


__all__ = [
    "F16",
    "BF16",
    "f16_to_f32",
    "bf16_to_f32",
    "f32_to_f16",
    "f32_to_bf16",
    "f64_to_f32_odd",
    "half_to_f32",
    "f32_to_half",
    "f64_to_half",
    "f32_as_u32",
    "u32_as_f32",
    "f64_as_u64",
    "u64_as_f64",
    "load_u16x4",
]
