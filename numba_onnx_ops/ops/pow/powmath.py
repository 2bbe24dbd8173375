"""Vectorizable x**y arithmetic: no libm call, branch-free per element, C99 special values.

Every function here is a scalar ``@njit`` function built only from arithmetic, bit
reinterpretations, selects and (float64 only) table loads, so that LLVM vectorizes the loops
calling them: PyPI's llvmlite has no SVML, so ``math.pow`` in a loop stays a scalar libm call.

float32, float16 and bfloat16 (whose values are float32 values) compute in float64 without
tables: ``log2 x = k + s*P(s*s)`` with ``s = (m-1)/(m+1)`` for ``x = 2**k * m``, m in
[sqrt(1/2), sqrt(2)), then ``2**t = 2**round(t) * Q(t - round(t))``.  Both carry ~2**-52
relative error, so before the single rounding to the narrow type the result is off by ~2**-45
relative at worst (|y log2 x| <= ~150 for finite float32 results): always within 1 ulp, and
wrongly rounded only when the exact value lies within ~2**-21 ulp of a rounding boundary.

float64 needs log in double-double.  It follows the scheme of ARM's optimized-routines ``pow``
(0.52 ulp) with tables and polynomials of our own: ``x = 2**k * z``, z in [0x1.69555p-1,
0x1.69555p0) split into 128 subintervals, each with a ``c`` whose ``1/c`` has 8 significant
bits, so ``r = z/c - 1`` is exact and ``log x = k*ln2 + log c + log1p(r)`` (relative error
~2**-68); then ``exp`` of the double-double ``y*log x`` through ``2**(j/128)`` as a
double-double, the product of a 16-entry and an 8-entry table (``exp_wide_vectors``: register
permutes on AVX-512, no gather), precomputed for all 128 j for the other paths.  float64
results that overflow, underflow or are subnormal are flagged for the caller's slow path.
Tables are built here at import from their definitions (``decimal``, 60 digits); polynomial
coefficients are near-minimax fits made with mpmath, their errors quoted beside them.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ...runtime.half import f32_as_u32, f64_as_u64, u32_as_f32, u64_as_f64
from ...runtime.jit import helper
from ...runtime.vectors import vector_fma, vector_splat

_U64 = types.uint64
_U32 = types.uint32
_I64 = types.int64


@intrinsic
def fma(typingctx, a, b, c):
    """a*b + c with one rounding (LLVM's ``llvm.fma.f64``; one vfmadd instruction here)."""
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return sig, codegen


# --------------------------------------------------------------------------------------------
# Tables


def _double(u: int) -> float:
    return float(np.array(u, np.uint64).view(np.float64))


def _round_to(value: Decimal, quantum_exp: int) -> float:
    """``value`` rounded to a multiple of 2**quantum_exp (exact in a double here)."""
    scaled = (value * (Decimal(2) ** -quantum_exp)).to_integral_value()
    return math.ldexp(float(int(scaled)), quantum_exp)


LOG_BITS = 7
_LOG_N = 1 << LOG_BITS
_LOG_OFF = 0x3FE6955500000000  # 0x1.69555p-1: start of z's range, puts 1.0 mid-subinterval
EXP_BITS = 7
_EXP_N = 1 << EXP_BITS
_INVC_BASE = 0x3FE0000000000000  # the bits of 0.5
_INVC_SHIFT = 44  # 1/c has 8 significant bits: 52 - 44
_INVC_CODE_BITS = 9
_INVC_CODE_MASK = (1 << _INVC_CODE_BITS) - 1


# 2**(j/128) for j = 8 jh + jl is the product of 2**(jh/16) and 2**(jl/128), each a
# double-double from a table of 16 or 8 entries: tables that fit in vector registers, where
# AVX-512 looks them up with one permute each instead of a gather (``_exp_factor_vectors``).
EXP_COARSE = 16
EXP_FINE = _EXP_N // EXP_COARSE
_FINE_BITS = EXP_FINE.bit_length() - 1


def _nearest(q: Fraction) -> float:
    """The double nearest to ``q`` (ties to even: Python's int division rounds correctly)."""
    return float(q)


def _exp_tables(ln2: Decimal):
    """(P, PLO, factors): P[j] + PLO[j] = 2**(j/128) to ~2**-104 relative, computed exactly
    as ``_exp_factor_vectors`` computes it from the factors (the double-double 2**(jh/16) and
    2**(jl/128): hi and lo of the coarse, then of the fine table), so that the table and the
    permutes give the same bits:

        p = a_hi * b_hi;  e = fma(a_hi, b_hi, -p);  plo = fma(a_hi, b_lo, fma(a_lo, b_hi, e))
    """

    def split(exact: Decimal) -> tuple[float, float]:
        hi = float(exact)
        return hi, float(exact - Decimal(hi))

    coarse = [split((ln2 * jh / EXP_COARSE).exp()) for jh in range(EXP_COARSE)]
    fine = [split((ln2 * jl / _EXP_N).exp()) for jl in range(EXP_FINE)]
    p = np.empty(_EXP_N)
    plo = np.empty(_EXP_N)
    for j in range(_EXP_N):
        (a_hi, a_lo), (b_hi, b_lo) = coarse[j // EXP_FINE], fine[j % EXP_FINE]
        fa_hi, fa_lo, fb_hi, fb_lo = (Fraction(v) for v in (a_hi, a_lo, b_hi, b_lo))
        p[j] = _nearest(fa_hi * fb_hi)
        e = fa_hi * fb_hi - Fraction(p[j])  # exact in a double: the error of a product
        plo[j] = _nearest(fa_hi * fb_lo + Fraction(_nearest(fa_lo * fb_hi + e)))
    factors = tuple(np.array([c[i] for c in table]) for table in (coarse, fine) for i in (0, 1))
    return p, plo, factors


def _build_tables():
    with localcontext() as ctx:
        ctx.prec = 60
        ln2 = Decimal(2).ln()
        invc = np.empty(_LOG_N)
        logc_hi = np.empty(_LOG_N)
        logc_lo = np.empty(_LOG_N)
        for i in range(_LOG_N):
            lo = _double(_LOG_OFF + (i << (52 - LOG_BITS)))
            hi = _double(_LOG_OFF + ((i + 1) << (52 - LOG_BITS)))
            centre = (lo + hi) / 2
            # 1/c with 8 significant bits makes z*invc exact; c = 1 where the subinterval
            # holds 1.0 (its neighbour below rounds to 1 by itself).
            if lo <= 1.0 < hi:
                ic = 1.0
            elif centre < 1:
                ic = round(_LOG_N / centre) / _LOG_N
            else:
                ic = round(2 * _LOG_N / centre) / _LOG_N / 2
            logc = -Decimal(ic).ln()
            invc[i] = ic
            # log(c) to a multiple of 2**-43, so that k*LN2_HI + logc_hi is exact for any k
            logc_hi[i] = _round_to(logc, -43)
            logc_lo[i] = float(logc - Decimal(logc_hi[i]))
        exp_p, exp_plo, factors = _exp_tables(ln2)
        # One gather instead of two: log(c)'s high part has at least 11 zero bits at the low
        # end of its mantissa (a multiple of 2**-43 below 0.5), where 1/c (8 significant bits,
        # in [0.70, 1.42]) goes as the 9-bit code (bits(1/c) - bits(0.5)) >> 44.
        codes = (invc.view(np.uint64) - np.uint64(_INVC_BASE)) >> np.uint64(_INVC_SHIFT)
        assert codes.max() < 1 << _INVC_CODE_BITS
        hi_bits = logc_hi.view(np.uint64)
        assert not (hi_bits & np.uint64(_INVC_CODE_MASK)).any()
        packed = (hi_bits | codes).view(np.float64)
        ln2_hi = _round_to(ln2, -42)  # 42 bits: k * LN2_HI is exact for |k| < 2**11
        ln2_lo = float(ln2 - Decimal(ln2_hi))
        step = ln2 / _EXP_N
        step_hi = _round_to(step, -44)  # 36 bits: n * step_hi exact for |n| < 2**17
        step_lo = float(step - Decimal(step_hi))
        inv_step = float(1 / step)
    return packed, logc_lo, exp_p, exp_plo, factors, ln2_hi, ln2_lo, step_hi, step_lo, inv_step


(
    LOG_C_HI_INVC,
    LOG_C_LO,
    EXP_P,
    EXP_PLO,
    EXP_FACTORS,
    LN2_HI,
    LN2_LO,
    LN2N_HI,
    LN2N_LO,
    INV_LN2N,
) = _build_tables()

_SHIFT = 6755399441055744.0  # 0x1.8p52: adding it rounds |v| < 2**51 to an integer in the low bits
_OFF = np.uint64(_LOG_OFF)
_TOP12 = np.uint64(0xFFF << 52)
_LOW_MASK = np.uint64(_LOG_N - 1)
_EXP_MASK = np.uint64(_EXP_N - 1)
_SIGN = np.uint64(1 << 63)
_CODE_MASK = np.uint64(_INVC_CODE_MASK)
_CODE_SHIFT = np.uint64(_INVC_SHIFT)
_CODE_BASE = np.uint64(_INVC_BASE)

# log2(m) = s * P(s*s) for s*s <= 0.02944 (m in [sqrt(1/2), sqrt(2))); relative error 2**-52.
_P0 = float.fromhex("0x1.71547652b82ffp+1")
_P1 = float.fromhex("0x1.ec709dc39c9afp-1")
_P2 = float.fromhex("0x1.2776c516ae8b8p-1")
_P3 = float.fromhex("0x1.a617567125035p-2")
_P4 = float.fromhex("0x1.484fada8935d8p-2")
_P5 = float.fromhex("0x1.0bb78f93c6452p-2")
_P6 = float.fromhex("0x1.f188dfd4d9effp-3")
# 2**f = 1 + f * Q(f) on |f| <= 1/4; relative error 2**-48.
_Q1 = float.fromhex("0x1.62e42fefa3982p-1")
_Q2 = float.fromhex("0x1.ebfbdff82c49cp-3")
_Q3 = float.fromhex("0x1.c6b08d7124befp-5")
_Q4 = float.fromhex("0x1.3b2ab6fc4ba01p-7")
_Q5 = float.fromhex("0x1.5d87f5edccc77p-10")
_Q6 = float.fromhex("0x1.43090aeb27e2bp-13")
_Q7 = float.fromhex("0x1.001ca836c6459p-16")
_Q8 = float.fromhex("0x1.630be8ff6f694p-20")
_SQRT2 = math.sqrt(2.0)
# log1p(r) - r + r*r/2 = r**3 * A(r) on |r| <= 0.0058; error 2**-70 relative to log1p(r).
_A0 = float.fromhex("0x1.5555555555555p-2")
_A1 = float.fromhex("-0x1.0000000000008p-2")
_A2 = float.fromhex("0x1.99999999999cap-3")
_A3 = float.fromhex("-0x1.55555551ee4eep-3")
_A4 = float.fromhex("0x1.2492491ed3e49p-3")
_A5 = float.fromhex("-0x1.0003162b12884p-3")
_A6 = float.fromhex("0x1.c723a8d3ce6b3p-4")
# exp(r) = 1 + r + r**2 * B(r) on |r| <= ln2/256 (+2**-10); relative error 2**-63.6.
_B0 = float.fromhex("0x1.fffffffffff57p-2")
_B1 = float.fromhex("0x1.5555555555495p-3")
_B2 = float.fromhex("0x1.55555acf7d298p-5")
_B3 = float.fromhex("0x1.111115c2ce0adp-7")

_INF = math.inf
_NAN = math.nan
_F32_T_MAX = 200.0  # |y log2 x| beyond this is 0 or inf in float32 and in the half types
_F32_MIN_NORMAL = np.float32(2.0**-126)
_F32_INF = np.float32(np.inf)

# Leaves are plain functions that LLVM inlines (each is small); the public element functions
# are inlined by numba so that the kernel's loop body is one function LLVM can vectorize.
_jit = helper(error_model="numpy")
_element = njit(error_model="numpy", inline="always")


# --------------------------------------------------------------------------------------------
# Shared pieces


@_jit
def _is_int(y):
    return np.floor(y) == y


@_jit
def _is_odd(y):
    """y is an odd integer (false for NaN and infinities)."""
    h = y * 0.5
    return (np.floor(y) == y) & (np.floor(h) != h)


@_jit
def _special_rules(m, x, y):
    """Apply the sign and the C99 rules to ``m = |x|**y`` (any of 0, inf for 0/inf inputs).

    -x**y for negative x and odd y, NaN for a negative finite x and non-integer y, NaN in ->
    NaN out, then x**0 = 1, 1**y = 1 and (-1)**(+-inf) = 1.
    """
    a = abs(x)
    neg = (f64_as_u64(x) & _SIGN) != _U64(0)
    r = -m if (neg & _is_odd(y)) else m
    r = _NAN if (neg & (not _is_int(y)) & (a != 0.0) & (a != _INF)) else r
    r = _NAN if ((x != x) | (y != y)) else r
    return 1.0 if ((y == 0.0) | (x == 1.0) | ((a == 1.0) & (abs(y) == _INF))) else r


# --------------------------------------------------------------------------------------------
# float32 and the half types: table-free.  (A table-driven variant, with the float64 tables
# below, ran at the same speed: AVX2 without fast gathers makes LLVM split each table load
# into four scalar loads, which cost as much as this division.)  On AVX-512, float32 bases
# take their exp step from ``narrow_exp2_vectors`` instead: a 16-entry table fits in two
# registers there.  Its results and ``narrow_exp2``'s differ only where 2**t lies within about
# 2**-48 of a float32 rounding boundary (rare: docs/design.md, "Float arithmetic without libm").


@_jit
def _log2_narrow(a):
    """log2(a) for a normal float32 a > 0, relative error ~2**-52.

    a = 2**k * m with m in [sqrt(1/2), sqrt(2)); log2(m) = s * P(s*s), s = (m-1)/(m+1),
    |s| <= 0.1716: m - 1 and m + 1 are exact, s carries one rounding.
    """
    # numba widens 32-bit integer arithmetic to 64 bits; the casts keep the vector code in
    # 8 x 32-bit lanes instead of shuffling between lane widths.
    ia = f32_as_u32(a)
    tmp = _U32(ia - _U32(0x3F3504F3))  # sqrt(1/2)
    k = types.float64(types.int32(types.int32(tmp) >> types.int32(23)))
    m = types.float64(u32_as_f32(_U32(ia - _U32(tmp & _U32(0xFF800000)))))
    sv = (m - 1.0) / (m + 1.0)
    u = sv * sv
    u2 = u * u
    # Estrin's scheme: shorter dependency chains than Horner's.
    p = fma(u2, fma(u, _P3, _P2), fma(u, _P1, _P0))
    p = fma(u2 * u2, fma(u2, _P6, fma(u, _P5, _P4)), p)
    return fma(sv, p, k)


@_jit
def _exp2_narrow(t):
    """2**t for |t| <= 200 (relative error ~2**-48); no overflow or subnormal is possible.

    t = n/2 + f with n = round(2t), |f| <= 1/4 exact; 2**(n/2) is 2**(n >> 1) built in the
    exponent field, times sqrt(2) for odd n (a two-entry table, as a select).
    """
    kd = fma(t, 2.0, _SHIFT)  # 2t is exact, so one rounding either way; one instruction
    ki = f64_as_u64(kd)  # low bits: n in two's complement
    f = fma(kd - _SHIFT, -0.5, t)  # exact
    scale = u64_as_f64(((ki >> _U64(1)) + _U64(1023)) << _U64(52))
    scale = scale * _SQRT2 if (ki & _U64(1)) else scale
    f2 = f * f
    q = fma(f2, fma(f, _Q4, _Q3), fma(f, _Q2, _Q1))
    q = fma(f2 * f2, fma(f2, fma(f, _Q8, _Q7), fma(f, _Q6, _Q5)), q)
    return fma(scale, f * q, scale)


@_element
def pow_narrow_abs(x, y):
    """|x|**y for a normal float32 x (float32, float16 or bfloat16 values) and a finite
    float64 y: the float64 result rounds to the narrow type within 1 ulp (nearly always
    correctly).  Zero, subnormal, infinite or NaN x and infinite or NaN y give garbage (never a
    trap): ``pow_narrow_sign`` fixes zero bases and signs, the caller's slow path the rest.

    The float32 kernel runs its two halves, ``narrow_log_term`` and ``narrow_exp2``, in
    separate loops over a block of elements (``kernels._apply_narrow_general``); half bases
    take it whole.
    """
    return narrow_exp2(narrow_log_term(x, y))


@_element
def narrow_log_term(x, y):
    """t = y * log2|x| for ``pow_narrow_abs``, clamped to [-200, 200]: |t| >= 200 is 0 or inf
    in every narrow type, and the clamp keeps 2**t finite and normal."""
    t = y * _log2_narrow(abs(x))
    return min(max(t, -_F32_T_MAX), _F32_T_MAX)


@_element
def narrow_exp2(t):
    """2**t for a ``narrow_log_term`` t."""
    return _exp2_narrow(t)


# float32 bases on AVX-512: 2**t through a 16-entry table that a register permute reads
# (``narrow_exp2_vectors``), with a shorter polynomial than ``_exp2_narrow``'s:
#   n = round(16 t), f = t - n/16 (exact, |f| <= 1/32),
#   2**t = 2**(n >> 4) * T[n & 15] * (1 + f * R(f)),  T[j] = 2**(j/16) rounded (EXP_FACTORS'
# coarse table), the power of two added to T's exponent field.
# 2**f = 1 + f * R(f) on |f| <= 1/32: relative error 2**-56.8.
_R1 = float.fromhex("0x1.62e42fefa39fdp-1")
_R2 = float.fromhex("0x1.ebfbdff82c564p-3")
_R3 = float.fromhex("0x1.c6b08d6e8a53cp-5")
_R4 = float.fromhex("0x1.3b2ab6fd63174p-7")
_R5 = float.fromhex("0x1.5d89be20803d5p-10")
_R6 = float.fromhex("0x1.43089ce70e38ap-13")
EXP2_16 = EXP_FACTORS[0]
_EXP2_16_R = (_R1, _R2, _R3, _R4, _R5, _R6)


def _masked_load(builder, vt, ptr, mask, fill, align):
    """The vector of type ``vt`` at ``ptr``, lanes off in ``mask`` not read (``fill``'s
    lanes instead): ``llvm.masked.load``."""
    i32, m = ir.IntType(32), ir.VectorType(ir.IntType(1), vt.count)
    suffix = "f64" if isinstance(vt.element, ir.DoubleType) else "f32"
    fn = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(vt, [vt.as_pointer(), i32, m, vt]),
        f"llvm.masked.load.v{vt.count}{suffix}.p0",
    )
    return builder.call(fn, [ptr, ir.Constant(i32, align), mask, fill])


def _masked_store(builder, value, ptr, mask, align):
    """Store the lanes of ``value`` on in ``mask`` at ``ptr``: ``llvm.masked.store``."""
    vt = value.type
    i32, m = ir.IntType(32), ir.VectorType(ir.IntType(1), vt.count)
    suffix = "f64" if isinstance(vt.element, ir.DoubleType) else "f32"
    fn = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(ir.VoidType(), [vt, vt.as_pointer(), i32, m]),
        f"llvm.masked.store.v{vt.count}{suffix}.p0",
    )
    builder.call(fn, [value, ptr, ir.Constant(i32, align), mask])


def _by_eight(builder, total, step):
    """``step(i, None)`` for i = 0, 8, ... over the whole vectors of ``total`` (an i64)
    elements, then ``step(i, mask)`` once for the last ``total % 8``, ``mask`` the lanes that
    exist: the loop of the vector intrinsics here, none of whose elements is computed another
    way."""
    i64 = ir.IntType(64)
    eight = ir.Constant(i64, 8)
    count = builder.sdiv(total, eight)
    with cgutils.for_range(builder, count) as loop:
        step(builder.mul(loop.index, eight), None)
    i = builder.mul(count, eight)
    rest = builder.sub(total, i)
    with builder.if_then(builder.icmp_signed(">", rest, ir.Constant(i64, 0))):
        q8 = ir.VectorType(i64, 8)
        lanes = ir.Constant(q8, list(range(8)))
        step(i, builder.icmp_signed("<", lanes, vector_splat(builder, rest, q8)))


@intrinsic
def narrow_exp2_vectors(typingctx, t, out, n):
    """``out[i]`` = 2**``t[i]`` rounded to ``out``'s float32 or float64, for i < n and
    |t[i]| <= 200 (relative error ~2**-52 before that rounding), 8 at a time; the last n % 8
    by masked loads and stores, so that no element is computed another way.  The table by one
    ``vpermi2pd`` of two registers instead of a gather.  AVX-512F only; ``t`` float64 and
    both C-contiguous."""
    if not (
        isinstance(t, types.Array)
        and t.dtype == types.float64
        and isinstance(out, types.Array)
        and out.dtype in (types.float32, types.float64)
        and t.layout == out.layout == "C"
        and isinstance(n, types.Integer)
    ):
        return None
    sig = types.void(t, out, n)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        d8 = ir.VectorType(ir.DoubleType(), 8)
        q8 = ir.VectorType(i64, 8)
        o8 = ir.VectorType(context.get_value_type(signature.args[1].dtype), 8)
        tp, op = (
            context.make_array(ty)(context, builder, a).data
            for ty, a in zip(signature.args[:2], args[:2], strict=True)
        )
        permi2 = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(d8, [d8, q8, d8]), "llvm.x86.avx512.vpermi2var.pd.512"
        )
        fma8 = vector_fma(builder, d8)

        def splat(v, vt=d8):
            return ir.Constant(vt, [v] * 8)

        def vfma(a, b, c):
            return builder.call(fma8, [a, b, c])

        low, high = (ir.Constant(d8, [float(v) for v in EXP2_16[i : i + 8]]) for i in (0, 8))
        r1, r2, r3, r4, r5, r6 = (splat(c) for c in _EXP2_16_R)
        shift = splat(_SHIFT)
        align = context.get_abi_alignment(o8.element)

        def exp2(tv):
            kd = vfma(tv, splat(16.0), shift)
            ki = builder.bitcast(kd, q8)
            f = vfma(builder.fsub(kd, shift), splat(-0.0625), tv)
            table = builder.bitcast(builder.call(permi2, [low, ki, high]), q8)  # low 4 bits
            scale = builder.shl(builder.lshr(ki, splat(4, q8)), splat(52, q8))
            st = builder.bitcast(builder.add(table, scale), d8)
            f2 = builder.fmul(f, f)
            q = vfma(f2, vfma(f, r4, r3), vfma(f, r2, r1))
            q = vfma(builder.fmul(f2, f2), vfma(f, r6, r5), q)
            r = vfma(st, builder.fmul(f, q), st)
            return r if o8.element == d8.element else builder.fptrunc(r, o8)

        def at(ptr, i, vt):
            return builder.bitcast(builder.gep(ptr, [i]), vt.as_pointer())

        def step(i, mask):
            if mask is None:
                r = exp2(builder.load(at(tp, i, d8), align=8))
                builder.store(r, at(op, i, o8), align=align)
            else:
                tv = _masked_load(builder, d8, at(tp, i, d8), mask, splat(0.0), 8)
                _masked_store(builder, exp2(tv), at(op, i, o8), mask, align)

        _by_eight(builder, context.cast(builder, args[2], signature.args[2], types.int64), step)
        return context.get_dummy_value()

    return sig, codegen


@_element
def pow_narrow_sign(x, y, m):
    """x**y from ``m = |x|**y`` (as computed by ``pow_narrow_abs``, rounded or not) for a
    finite x and a finite y: C99's values for zero bases and the signs of negative ones.

    -1 for an odd integer y, NaN for a non-integer y (except at -0.0, where C99 keeps +-0 or
    +-inf).  With a scalar y, the tests on y are loop invariants.
    """
    zero = x == 0.0
    m = (_INF if y < 0.0 else (0.0 if y > 0.0 else 1.0)) if zero else m
    odd = -1.0 if _is_odd(y) else 1.0
    factor = odd if zero else (odd if _is_int(y) else _NAN)
    neg = (f64_as_u64(x) & _SIGN) != _U64(0)
    return m * factor if neg else m


@_jit
def narrow_sign_factors(y):
    """``pow_narrow_sign``'s factors for a finite y as float32: (for a zero base, for any other
    negative one).  With them, a float32 loop over one scalar y applies its rules in float32
    lanes, without widening each element (``kernels._scalar_signs``)."""
    odd = np.float32(-1.0) if _is_odd(y) else np.float32(1.0)
    return odd, odd if _is_int(y) else np.float32(_NAN)


@_jit
def pow_narrow_needs_libm(x, y):
    """The elements ``pow_narrow_abs`` leaves to libm: x or y infinite or NaN, x subnormal."""
    a = abs(x)
    return not ((a == 0.0 or (a >= _F32_MIN_NORMAL and a < _F32_INF)) and abs(y) < _INF)


@_element
def ipow_narrow(v, n):
    """v**n for a float32 value v and an integer |n| < 32, squaring in float64.

    At most eight roundings of 2**-53: the float64 result is within ~2**-50 relative, far
    inside half a float32 ulp; overflow and underflow land on inf and 0 as they should.
    """
    r = pow_by_squaring(v, abs(n), 1.0)
    return 1.0 / r if n < 0 else r


@_jit
def pow_by_squaring(b, e, one):
    """b**e for 0 <= e < 32 in five squarings, with selects instead of branches so that the
    loops calling it vectorize: wrapping products for int64 ``b``, float64 roundings for
    float64 ``b`` (``one`` is 1 of b's type)."""
    r = b if (e & 1) else one
    b = b * b
    r = r * b if (e & 2) else r
    b = b * b
    r = r * b if (e & 4) else r
    b = b * b
    r = r * b if (e & 8) else r
    b = b * b
    return r * b if (e & 16) else r


# --------------------------------------------------------------------------------------------
# float64


@_jit
def _log_wide(ix):
    """log(x) as hi + lo (relative error ~2**-68) from the bits of a positive normal x, or of a
    subnormal x scaled by 2**52 with 52 << 52 subtracted (the exponent wraps below zero)."""
    tmp = ix - _OFF
    i = (tmp >> _U64(52 - LOG_BITS)) & _LOW_MASK
    kd = types.float64(types.int32(types.int64(tmp) >> _I64(52)))
    z = u64_as_f64(ix - (tmp & _TOP12))
    packed = f64_as_u64(LOG_C_HI_INVC[i])
    invc = u64_as_f64(((packed & _CODE_MASK) << _CODE_SHIFT) + _CODE_BASE)
    logc_hi = u64_as_f64(packed & ~_CODE_MASK)
    r = fma(z, invc, -1.0)  # exact: |r| < 2**-7 and z*invc has at most 61 bits
    t1 = fma(kd, LN2_HI, logc_hi)  # exact (see the table)
    t2 = t1 + r
    lo1 = fma(kd, LN2_LO, LOG_C_LO[i])
    lo2 = t1 - t2 + r  # exact: |t1| > |r| whenever t1 != 0
    ar = -0.5 * r
    ar2 = r * ar
    hi = t2 + ar2
    lo3 = fma(ar, r, -ar2)
    lo4 = t2 - hi + ar2  # exact: |t2| >> r*r/2
    q = fma(r, fma(r, fma(r, fma(r, fma(r, fma(r, _A6, _A5), _A4), _A3), _A2), _A1), _A0)
    p = r * r * r * q
    lo = lo1 + lo2 + lo3 + lo4 + p
    y = hi + lo
    return y, hi - y + lo


@_jit
def exp_reduce(x, xtail):
    """(r, ki) of ``_exp_wide``: x + xtail = n ln2/128 + r, n in the low bits of ``ki``."""
    kd = fma(x, INV_LN2N, _SHIFT)
    ki = f64_as_u64(kd)
    kd -= _SHIFT
    r = fma(-kd, LN2N_LO, fma(-kd, LN2N_HI, x)) + xtail  # |r| <= ln2/256 + eps
    return r, ki


@_jit
def exp_in_range(ehi):
    """Whether ``_exp_wide`` of ``ehi`` (+ a tail) is a normal float64 (|ehi| < 708)."""
    return abs(ehi) < 708.0


@_jit
def exp_scale(ki):
    """2**q for n = 128 q + j in the low bits of ``ki`` (|q| <= 1021 where it matters)."""
    return u64_as_f64(((ki & ~_EXP_MASK) << _U64(52 - EXP_BITS)) + _U64(1023 << 52))


@_jit
def exp_finish(r, p, plo, scale):
    """exp(r) * 2**(j/128) * 2**q from P[j] + PLO[j] = 2**(j/128) and ``scale`` = 2**q: one
    rounding (the sum; the power of two is exact for normal results)."""
    r2 = r * r
    tmp = fma(r2 * r2, fma(r, _B3, _B2), fma(r2, fma(r, _B1, _B0), r))
    return scale * (p + fma(p, tmp, plo))


@_jit
def exp_factors_at(ki):
    """(P[j], PLO[j]) for the bits ``ki`` of ``exp_reduce``."""
    j = ki & _EXP_MASK
    return EXP_P[j], EXP_PLO[j]


@_jit
def _exp_wide(x, xtail):
    """exp(x + xtail) for |x| < 708 (normal results), ~0.51 ulp before the caller's sign."""
    r, ki = exp_reduce(x, xtail)
    p, plo = exp_factors_at(ki)
    return exp_finish(r, p, plo, exp_scale(ki))


def _exp_factor_vectors(builder, ki):
    """(P[j], PLO[j], ``exp_scale(ki)``) for 8 lanes of ``exp_reduce``'s bits ``ki``, the bits
    the tables hold, without a gather: two permutes of the coarse table (16 entries in two
    registers, ``vpermi2pd``), two of the fine one (8 entries, ``vpermpd``) and the product of
    the factors as ``_exp_tables`` computes it.  AVX-512F only.  (Gathers were a large part of
    a float64 x**y: docs/design.md, "Float arithmetic without libm".)"""
    q8 = ki.type
    d8 = ir.VectorType(ir.DoubleType(), q8.count)
    module = builder.module
    permi2 = cgutils.get_or_insert_function(
        module, ir.FunctionType(d8, [d8, q8, d8]), "llvm.x86.avx512.vpermi2var.pd.512"
    )
    permvar = cgutils.get_or_insert_function(
        module, ir.FunctionType(d8, [d8, q8]), "llvm.x86.avx512.permvar.df.512"
    )
    fma8 = vector_fma(builder, d8)
    c_hi, c_lo, f_hi, f_lo = (
        [ir.Constant(d8, [float(v) for v in t[i : i + 8]]) for i in range(0, t.size, 8)]
        for t in EXP_FACTORS
    )

    def splat(v):
        return ir.Constant(q8, [v] * 8)

    jh = builder.lshr(ki, splat(_FINE_BITS))  # permutes read the low bits only
    a_hi = builder.call(permi2, [c_hi[0], jh, c_hi[1]])
    a_lo = builder.call(permi2, [c_lo[0], jh, c_lo[1]])
    b_hi = builder.call(permvar, [f_hi[0], ki])
    b_lo = builder.call(permvar, [f_lo[0], ki])
    prod = builder.fmul(a_hi, b_hi)
    err = builder.call(fma8, [a_hi, b_hi, builder.fneg(prod)])
    low = builder.call(fma8, [a_hi, b_lo, builder.call(fma8, [a_lo, b_hi, err])])
    q = builder.shl(builder.and_(ki, splat(~(_EXP_N - 1) & (2**64 - 1))), splat(52 - EXP_BITS))
    return prod, low, builder.bitcast(builder.add(q, splat(1023 << 52)), d8)


@intrinsic
def exp_wide_vectors(typingctx, x, y, out, low, n):
    """For i < n: ``out[i]`` = x[i] ** y (or ** y[i]) from log|x[i]| = ``out[i]`` + ``low[i]``,
    ``exp_wide_of_log``'s arithmetic bit for bit, 8 lanes at a time (the last n % 8 by masked
    loads and stores), the table factors by permutes (``_exp_factor_vectors``); returns
    (whether a result was flagged, whether every exponent is finite: if not, the results are
    garbage).  For normal finite bases, as ``exp_wide_of_log``.  AVX-512F only; ``x``,
    ``out`` and ``low`` float64 and C-contiguous, ``y`` a float64 or such an array.  (The
    loop LLVM vectorizes from ``exp_wide_of_log`` gathers the two table entries; without this
    intrinsic, keeping the gathers out took three loops and two scratch buffers.)"""
    arrays = (x, out, low)
    if not all(isinstance(a, types.Array) and a.dtype == types.float64 for a in arrays):
        return None
    y_array = isinstance(y, types.Array)
    if y_array and y.dtype != types.float64 or not y_array and y != types.float64:
        return None
    if any(a.layout != "C" for a in (*arrays, *([y] if y_array else []))):
        return None
    if not isinstance(n, types.Integer):
        return None
    sig = types.UniTuple(types.boolean, 2)(x, y, out, low, n)

    def codegen(context, builder, signature, args):
        i1, i8, i64 = ir.IntType(1), ir.IntType(8), ir.IntType(64)
        d8 = ir.VectorType(ir.DoubleType(), 8)
        q8 = ir.VectorType(i64, 8)
        m8 = ir.VectorType(i1, 8)
        xty, yty, oty, lty, nty = signature.args
        xp, op, lp = (
            context.make_array(t)(context, builder, a).data
            for t, a in ((xty, args[0]), (oty, args[2]), (lty, args[3]))
        )
        yp = context.make_array(yty)(context, builder, args[1]).data if y_array else None
        module = builder.module
        fma8 = vector_fma(builder, d8)
        fabs8 = cgutils.get_or_insert_function(module, ir.FunctionType(d8, [d8]), "llvm.fabs.v8f64")
        floor8 = cgutils.get_or_insert_function(
            module, ir.FunctionType(d8, [d8]), "llvm.floor.v8f64"
        )

        def splat(v, vt=d8):
            return ir.Constant(vt, [v] * 8)

        def vfma(a, b, c):
            return builder.call(fma8, [a, b, c])

        def at(ptr, i):
            return builder.bitcast(builder.gep(ptr, [i]), d8.as_pointer())

        def load(ptr, i, mask, fill):
            if mask is None:
                return builder.load(at(ptr, i), align=8)
            return _masked_load(builder, d8, at(ptr, i), mask, splat(fill), 8)

        y_scalar = None if y_array else vector_splat(builder, args[1], d8)
        flagged = cgutils.alloca_once_value(builder, ir.Constant(m8, [0] * 8))
        infinite = cgutils.alloca_once_value(builder, ir.Constant(m8, [0] * 8))

        def step(i, mask):
            lhi, llo = load(op, i, mask, 0.0), load(lp, i, mask, 0.0)
            xv = load(xp, i, mask, 1.0)
            yv = load(yp, i, mask, 0.0) if y_array else y_scalar
            # times_log
            ehi = builder.fmul(yv, lhi)
            elo = builder.fadd(builder.fmul(yv, llo), vfma(yv, lhi, builder.fneg(ehi)))
            # exp_reduce
            kd = vfma(ehi, splat(INV_LN2N), splat(_SHIFT))
            ki = builder.bitcast(kd, q8)
            nkd = builder.fneg(builder.fsub(kd, splat(_SHIFT)))
            r = builder.fadd(vfma(nkd, splat(LN2N_LO), vfma(nkd, splat(LN2N_HI), ehi)), elo)
            # exp_finish with the factors of j and 2**q
            p, plo, scale = _exp_factor_vectors(builder, ki)
            r2 = builder.fmul(r, r)
            tmp = vfma(
                builder.fmul(r2, r2),
                vfma(r, splat(_B3), splat(_B2)),
                vfma(r2, vfma(r, splat(_B1), splat(_B0)), r),
            )
            m = builder.fmul(scale, builder.fadd(p, vfma(p, tmp, plo)))
            # wide_sign
            is_int = builder.fcmp_ordered("==", builder.call(floor8, [yv]), yv)
            half = builder.fmul(yv, splat(0.5))
            odd = builder.and_(
                is_int, builder.fcmp_unordered("!=", builder.call(floor8, [half]), half)
            )
            factor = builder.select(
                odd, splat(-1.0), builder.select(is_int, splat(1.0), splat(_NAN))
            )
            neg = builder.fcmp_ordered("<", xv, splat(0.0))
            result = builder.select(neg, builder.fmul(m, factor), m)
            # exp_in_range, and (an array's) finite exponents
            bad = builder.fcmp_unordered(">=", builder.call(fabs8, [ehi]), splat(708.0))
            ybits = builder.and_(builder.bitcast(yv, q8), splat(0x7FFFFFFFFFFFFFFF, q8))
            inf = builder.icmp_unsigned(">=", ybits, splat(0x7FF << 52, q8))
            # (lanes past n: their zeros give ehi = 0 and a finite y, or a scalar y's own flags)
            builder.store(builder.or_(builder.load(flagged), bad), flagged)
            builder.store(builder.or_(builder.load(infinite), inf), infinite)
            if mask is None:
                builder.store(result, at(op, i), align=8)
            else:
                _masked_store(builder, result, at(op, i), mask, 8)

        _by_eight(builder, context.cast(builder, args[4], nty, types.int64), step)

        def any_lane(ptr):
            return builder.icmp_unsigned(
                "!=", builder.bitcast(builder.load(ptr), i8), ir.Constant(i8, 0)
            )

        return context.make_tuple(
            builder, signature.return_type, [any_lane(flagged), builder.not_(any_lane(infinite))]
        )

    return sig, codegen


@_element
def log_wide(x):
    """log|x| as (hi, lo) for the two-pass float64 kernel (garbage for 0, inf and NaN, which
    ``pow_wide_finish`` overrides)."""
    a = abs(x)
    ia = f64_as_u64(a)
    # Subnormal a: scale by 2**52 and move the exponent down by 52 (wrapping below zero).
    sub = f64_as_u64(a * 4503599627370496.0) - _U64(52 << 52)
    ia = sub if ia < _U64(1 << 52) else ia
    return _log_wide(ia)


@_element
def log_wide_normal(x):
    """log|x| as (hi, lo) for a normal finite x: ``log_wide`` without its cases."""
    return _log_wide(f64_as_u64(abs(x)))


@_element
def exp_wide_of_log(x, y, lhi, llo):
    """(x**y, ok) from log|x| = lhi + llo for a normal finite x and a finite y:
    ``pow_wide_finish`` without its special values (x = 1 and y = 0 come out as exactly 1:
    the log of 1 is exactly 0).  A negative x takes C99's sign (``wide_sign``).  The float64
    kernel on AVX-512 runs the same steps as vector code (``exp_wide_vectors``)."""
    ehi, elo = times_log(y, lhi, llo)
    return wide_sign(x, y, _exp_wide(ehi, elo)), exp_in_range(ehi)


@_element
def times_log(y, lhi, llo):
    """y * (lhi + llo) as a double-double (ehi, elo)."""
    ehi = y * lhi
    return ehi, y * llo + fma(y, lhi, -ehi)


@_element
def wide_sign(x, y, m):
    """x**y from m = |x|**y for a finite x != 0 and a finite y: -m for a negative x and an odd
    integer y, NaN for a negative x and a non-integer y (with a scalar y the factor is a loop
    invariant)."""
    factor = -1.0 if _is_odd(y) else (1.0 if _is_int(y) else _NAN)
    return m * factor if x < 0.0 else m


@_element
def pow_wide_finish(x, y, lhi, llo):
    """(x**y, ok) from log|x| = lhi + llo: within 1 ulp (0.52) when ok; ``ok`` is False only
    for finite results that overflow, underflow or are subnormal (|y ln x| >= 708), which the
    caller computes on a slow path."""
    a = abs(x)
    ehi, elo = times_log(y, lhi, llo)
    finite = exp_in_range(ehi)
    m = _exp_wide(ehi, elo)
    # Zero, infinite base or infinite exponent: the magnitude is 0 or inf.
    big = (a > 1.0) == (y > 0.0)  # |x|**y grows without bound
    special = (a == 0.0) | (a == _INF) | (abs(y) == _INF)
    m = (_INF if big else 0.0) if special else m
    ok = finite | special | (x != x) | (y != y) | (y == 0.0) | (x == 1.0)
    return _special_rules(m, x, y), ok


@_jit
def pow_wide_needs_libm(x, y):
    """True for at least every element that ``pow_wide_finish`` flags: a finite non-trivial
    power with |y ln|x|| >= 707 (flagged from 708; libm's log leaves a wide margin)."""
    a = abs(x)
    trivial = a == 0.0 or a == _INF or abs(y) == _INF or x != x or y != y or y == 0.0
    return not trivial and x != 1.0 and abs(y * math.log(a)) >= 707.0


@_element
def cube_wide(x):
    """x**3 with one rounding (0.5 ulp; <= 1 ulp where x**3 is subnormal): x*x = s + e
    exactly, then s*x + e*x in one fused step.  Where that overflows (or x is inf or NaN),
    the plain product has the right inf or NaN."""
    tiny = abs(x) < 2.0**-300  # scale up so that e*x does not underflow
    xs = x * 2.0**100 if tiny else x
    s = xs * xs
    e = fma(xs, xs, -s)
    r = fma(s, xs, e * xs)
    r = r if abs(r) < _INF else s * xs
    return r * 2.0**-300 if tiny else r


@_element
def rsqrt_wide(x):
    """x**-0.5: 1/sqrt(x) corrected by the exact residuals of the root and the division."""
    tiny = x < 1e-290  # 2**-963: scale up so that the residuals do not underflow
    xs = x * 2.0**200 if tiny else x
    s = np.sqrt(xs)
    d = fma(s, s, -xs)  # s*s - x, exact
    r0 = 1.0 / s
    e0 = fma(-r0, s, 1.0)  # 1 - r0*s, exact
    r = fma(r0, e0 + 0.5 * d * r0 * r0, r0)
    r = r * 2.0**100 if tiny else r
    # 0, inf, negative and NaN bases: C99 gives inf for +-0, 0 for +-inf, NaN below zero.
    plain = 1.0 / (np.sqrt(x) + 0.0)
    plain = 0.0 if x == -_INF else plain
    return r if ((x > 0.0) & (x < _INF)) else plain


@_element
def sqrt_any(x):
    """x**0.5 (correctly rounded by IEEE sqrt); C99: +0 for -0 and +inf for -inf."""
    r = np.sqrt(x) + 0.0
    return _INF if x == -_INF else r


@_element
def sqrt_narrow(x):
    """x**0.5 for a float32 x in float32 (8 lanes): IEEE sqrt is correctly rounded, and so is
    its rounding to float16 or bfloat16 (24 >= 2*11 + 2 bits, Figueroa); C99 as sqrt_any."""
    r = np.sqrt(x) + np.float32(0.0)
    return _F32_INF if x == -_F32_INF else r


@_element
def rsqrt_narrow(x):
    """x**-0.5 for a float32 value: two float64 roundings, far inside half a float32 ulp."""
    r = 1.0 / (np.sqrt(x) + 0.0)
    return 0.0 if x == -_INF else r
