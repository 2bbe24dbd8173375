"""Accuracy of Pow's float kernels, one exponent class at a time.

Pow picks a kernel per call from the exponent (``numba_onnx_ops/ops/pow/kernels.py``): x*x for a
scalar 2, a fused cube for 3, sqrt for 0.5, a division for -1, 1/sqrt for -0.5, squaring for
other small integers (float32 and half bases), and log/exp polynomials for everything else,
scalar or array exponents.  semantics.md asks every float result to be within 1 ulp of the
correctly rounded x ** float64(y).  Each class gets a million float32 inputs, a sample of float64
ones and every float16 and bfloat16 value.

Oracle: long double ``powl`` (x87, ~2**-63 relative), never numpy's float64 ``power`` (not
correctly rounded everywhere, e.g. numpy 1.26 on AVX-512); where long double is only float64,
mpmath's correctly rounded values on smaller samples.  Where the oracle cannot tell which of two
neighbours is the correctly rounded one, both are accepted.  Besides the 1-ulp bound, the
share of correctly rounded results must stay near 100% (the kernels' own error is far below
half an ulp), so that a regression in a polynomial shows up here first.  For float64, long
double has too few extra bits to tell (about 0.05% of its roundings to float64 are double
roundings), so that share and the worst distance come from a sample computed with mpmath at
128 bits, when mpmath is installed.  ``pytest -s`` prints them.

The slow test sweeps every float32 bit pattern for one general exponent.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from child import run_python
from oracles import (
    BF16,
    F16,
    F32,
    F64,
    LONGDOUBLE_IS_WIDE,
    LONGDOUBLE_POW_REL_ERR,
    assert_within_ulp,
    pow_float_exact,
    round_to_format,
    ulp_distance,
)

import numba_onnx_ops as noo
from numba_onnx_ops.runtime.cpu import vector_bits

# mpmath (where long double is float64) computes about 10^5 values a second, powl 10^7
N = 1_000_000 if LONGDOUBLE_IS_WIDE else 20_000
N_F64 = 300_000 if LONGDOUBLE_IS_WIDE else 20_000
N_MPMATH = 10_000

#: Scalar exponents by the class of kernel they select.
CLASSES = {
    "square": [2.0],
    "cube": [3.0],
    "sqrt": [0.5],
    "reciprocal": [-1.0],
    "rsqrt": [-0.5],
    "small integer": [4.0, 5.0, -2.0, -7.0, 17.0, 31.0, -31.0],
    "general": [3.7, -2.5, 0.1, 1 / 3, 100.25, -0.75, 1e-5],
}

#: Minimum share of correctly rounded results per dtype (the kernels' error before the final
#: rounding: ~2**-45 relative for float32 and the half types, ~2**-63 for float64, whose
#: classes 2, 0.5 and -1 are single IEEE operations).
MIN_CORRECTLY_ROUNDED = {F32: 0.99999, F64: 0.998, F16: 1.0, BF16: 1.0}


def _bases(dtype, exponents, n, rng) -> np.ndarray:
    """n bases: a quarter random bit patterns (any finite value, subnormals, both signs), the
    rest log-uniform with random signs over the range where x ** y stays finite and nonzero."""
    dtype = np.dtype(dtype)
    bits = {F32: np.uint32, F64: np.uint64}[dtype]
    raw = rng.integers(0, np.iinfo(bits).max, n // 4, dtype=bits, endpoint=True).view(dtype)
    raw = raw[np.isfinite(raw)]
    emin, emax = (-149, 128) if dtype == F32 else (-1074, 1024)
    reach = min(emax - 2, -emin - 2) / max(abs(float(e)) for e in np.ravel(exponents))
    lo, hi = max(-reach, emin), min(reach, emax - 1)
    with np.errstate(over="ignore", under="ignore"):
        spread = np.exp2(rng.uniform(lo, hi, n - raw.size)).astype(dtype)
    spread *= rng.choice(np.array([-1, 1], dtype), spread.size)
    return np.concatenate([raw, spread])


def _oracle(x, y, dtype) -> tuple[np.ndarray, float]:
    """x ** float64(y) in higher precision, and its relative error bound."""
    return pow_float_exact(x, y), LONGDOUBLE_POW_REL_ERR


def _check(x, y, dtype, what) -> tuple[float, float | None]:
    """Assert <= 1 ulp; return (max ulp distance, share correctly rounded) over finite results."""
    actual = noo.pow(x, y)
    exact, rel_err = _oracle(x, y, dtype)
    rounded = round_to_format(exact, dtype)
    dist = ulp_distance(actual, rounded)
    a64, r64 = actual.astype(np.float64), rounded.astype(np.float64)
    # Equal to the oracle's rounding (zeros of the same sign) passes; the rest, few, goes
    # through the full check, which also knows NaN, overflow and the oracle's uncertainty.
    suspect = ~(dist == 0) | ((a64 == 0) & (np.signbit(a64) != np.signbit(r64)))
    assert_within_ulp(actual[suspect], exact[suspect], dtype, rel_err=rel_err, what=what)
    finite = np.isfinite(r64)
    if np.dtype(dtype) == F64:
        return _f64_mpmath(x, y, actual, finite)
    share = float(np.mean(dist[finite] == 0)) if finite.any() else 1.0
    return float(np.max(dist[finite], initial=0)), share


def _f64_mpmath(x, y, actual, finite) -> tuple[float, float | None]:
    """(max ulp distance, share correctly rounded) over up to N_MPMATH normal float64 results,
    against mpmath at 128 bits (its float() rounds once, except into subnormals: excluded).
    Without mpmath, (nan, None): the 1-ulp assertion has run, the share is not measured."""
    try:
        import mpmath
    except ImportError:
        return float("nan"), None
    y = np.broadcast_to(y, x.shape)
    normal = finite & (np.abs(actual) >= np.finfo(F64).tiny)
    idx = np.flatnonzero(normal)[:N_MPMATH]
    with mpmath.workprec(128):
        ref = np.array([float(mpmath.power(float(x[i]), float(y[i]))) for i in idx])
    dist = ulp_distance(actual[idx], ref)
    return float(np.max(dist, initial=0)), float(np.mean(dist == 0)) if idx.size else 1.0


def _report(what, n, worst, share, dtype):
    if share is None:
        print(f"\n{what}: {n} inputs within 1 ulp (install mpmath for the share correctly rounded)")
        return
    sample = f" (mpmath sample of {N_MPMATH})" if np.dtype(dtype) == F64 else ""
    print(f"\n{what}: {n} inputs, max {worst:g} ulp, {100 * share:.5f}% correctly rounded{sample}")
    assert share >= MIN_CORRECTLY_ROUNDED[np.dtype(dtype)], f"{what}: only {share:.6%} correct"


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("klass", list(CLASSES))
def test_scalar_exponent_classes(klass, dtype, rng):
    exponents = CLASSES[klass]
    if dtype == F64 and klass == "small integer":
        exponents = exponents[:2]  # float64 takes the general kernel for these
    per = -(-(N if dtype == F32 else N_F64) // len(exponents))
    total, worst, hits = 0, 0.0, 0.0
    for e in exponents:
        x = _bases(dtype, [e], per, rng)
        w, share = _check(x, np.float64(e), dtype, f"{np.dtype(dtype).name} ** {e!r}")
        total, worst = total + x.size, max(worst, w)
        hits = None if share is None or hits is None else hits + share * x.size
    share = None if hits is None else hits / total
    _report(f"{np.dtype(dtype).name} ** {klass}", total, worst, share, dtype)


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_array_exponents(dtype, rng):
    """The general kernel with one exponent per element (a third of them integers)."""
    n = N if dtype == F32 else N_F64
    y = rng.uniform(-12, 12, n)
    y[::3] = np.round(y[::3])
    y = y.astype(dtype)
    x = _bases(dtype, [12.0], n, rng)
    worst, share = _check(x, y, dtype, f"{np.dtype(dtype).name} ** array")
    _report(f"{np.dtype(dtype).name} ** array of exponents", n, worst, share, dtype)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("klass", list(CLASSES))
def test_every_half_value(klass, dtype):
    x = np.arange(1 << 16, dtype=np.uint16).view(dtype)
    total, worst, hits = 0, 0.0, 0.0
    for e in CLASSES[klass]:
        w, share = _check(x, np.float32(e), dtype, f"{np.dtype(dtype).name} ** {e!r}")
        total, worst, hits = total + x.size, max(worst, w), hits + share * x.size
    _report(f"every {np.dtype(dtype).name} ** {klass}", total, worst, hits / total, dtype)


@pytest.mark.slow
@pytest.mark.skipif(not LONGDOUBLE_IS_WIDE, reason="needs an 80-bit long double powl")
def test_every_float32_to_the_3_7():
    """All 2**32 float32 bit patterns to the power 3.7 (the general kernel), against long
    double ``powl``; where it cannot tell the correctly rounded float32 apart, both neighbours
    are accepted."""
    y = np.float64(3.7)
    chunk = 1 << 24
    worst, wrong, finite_total = 0.0, 0, 0
    for start in range(0, 1 << 32, chunk):
        x = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32).view(F32)
        actual = noo.pow(x, y)
        exact = pow_float_exact(x, y)
        rounded = round_to_format(exact, F32)
        dist = ulp_distance(actual, rounded)
        nan = np.isnan(exact)
        assert np.array_equal(nan, np.isnan(actual)), f"NaN mismatch in chunk {start:#x}"
        zero = rounded == 0
        assert np.array_equal(np.signbit(actual[zero]), np.signbit(rounded[zero]))
        suspect = ~nan & ~(dist <= 1)
        if suspect.any():  # only where the oracle's own rounding could be the 1 ulp
            assert_within_ulp(
                actual[suspect],
                exact[suspect],
                F32,
                what=f"x ** 3.7 at {start:#x}",
            )
        finite = np.isfinite(rounded)
        worst = max(worst, float(np.max(dist[finite], initial=0)))
        wrong += int(np.count_nonzero(dist[finite] != 0))
        finite_total += int(np.count_nonzero(finite))
    print(
        f"\nevery float32 ** 3.7: {finite_total} finite results, max {worst:g} ulp, "
        f"{wrong} not correctly rounded ({100 * (1 - wrong / finite_total):.7f}% correct)"
    )


def test_exp_table_is_two_to_the_j_over_128():
    """float64's exp takes 2**(j/128) as the double-double P[j] + PLO[j], built from the
    coarse and fine factor tables; against mpmath at 200 bits."""
    mpmath = pytest.importorskip("mpmath")
    from numba_onnx_ops.ops.pow import powmath

    with mpmath.workprec(200):
        for j in range(powmath.EXP_P.size):
            exact = mpmath.power(2, mpmath.mpf(j) / powmath.EXP_P.size)
            approx = mpmath.mpf(float(powmath.EXP_P[j])) + mpmath.mpf(float(powmath.EXP_PLO[j]))
            assert abs(approx - exact) <= exact * mpmath.mpf(2) ** -100, j


@functools.cache
def _wide_exp_kernels():
    from numba import njit

    from numba_onnx_ops.ops.pow import powmath

    @njit
    def by_vectors(x, y, lhi, llo, n):
        out = lhi.copy()
        bad, finite = powmath.exp_wide_vectors(x, y, out, llo, n)
        return out, bad, finite

    @njit
    def by_elements(x, y, lhi, llo):
        out = np.empty_like(lhi)
        bad = np.empty(lhi.size, np.bool_)
        for i in range(lhi.size):
            out[i], ok = powmath.exp_wide_of_log(x[i], y[i], lhi[i], llo[i])
            bad[i] = not ok
        return out, bad

    return by_vectors, by_elements


@pytest.mark.skipif(vector_bits() != 512, reason="the permute lookup is AVX-512's")
def test_float64_exp_vectors_equal_the_element_steps(rng):
    """AVX-512's float64 exp step (one loop, the table factors by register permutes) gives
    the bits and the flags of the element function the other CPUs' loop is built from: for
    every table index next to every power of two of a normal result and past both ends, both
    signs, odd, even and fractional exponents, an array of exponents or one; the last n % 8
    elements masked, nothing written past n."""
    by_vectors, by_elements = _wide_exp_kernels()
    q = np.arange(-1022 * 128, 1024 * 128 + 1, 7)
    lhi = np.concatenate([q * (np.log(2.0) / 128), rng.uniform(-800.0, 800.0, 4000)])
    lhi = np.concatenate([lhi, np.nextafter(lhi, np.inf), np.nextafter(lhi, -np.inf)])
    llo = lhi * rng.uniform(-(2.0**-54), 2.0**-54, lhi.size)
    x = rng.uniform(0.5, 2.0, lhi.size) * rng.choice([-1.0, 1.0], lhi.size)
    for y in (1.0, 3.0, -2.0, 0.75):
        ys = np.full(lhi.size, y)
        expected, bad = by_elements(x, ys, lhi, llo)
        for exponent in (ys, np.float64(y)):
            out, flagged, finite = by_vectors(x, exponent, lhi, llo, lhi.size)
            assert np.array_equal(out.view(np.uint64), expected.view(np.uint64)), y
            assert (flagged, finite) == (bool(bad.any()), True)
    ys = rng.choice([-3.0, -2.0, 2.0, 0.5, 5.0, 1.25], lhi.size)
    expected, bad = by_elements(x, ys, lhi / 4, llo / 4)
    out, flagged, finite = by_vectors(x, ys, lhi / 4, llo / 4, lhi.size)
    assert np.array_equal(out.view(np.uint64), expected.view(np.uint64))
    for n in range(1, 25):
        lhi32, llo32 = lhi[:32] / 4, llo[:32] / 4
        lhi32[n:] = 1000.0  # out of range: flagged only if a masked-off lane counts
        part, flagged, finite = by_vectors(x, ys, lhi32, llo32, n)
        whole, bad = by_elements(x[:n], ys[:n], lhi32[:n], llo32[:n])
        assert np.array_equal(part[:n].view(np.uint64), whole.view(np.uint64)), n
        assert np.array_equal(part[n:], lhi32[n:]), n  # untouched
        assert (flagged, finite) == (bool(bad.any()), True), n
    ys[7] = np.inf
    assert by_vectors(x, ys, lhi / 4, llo / 4, lhi.size)[2] is False
    assert by_vectors(x, ys, lhi / 4, llo / 4, 7)[2] is True
    assert by_vectors(x, np.float64(np.nan), lhi, llo, 9)[2] is False


@functools.cache
def _narrow_exp2_kernel():
    from numba import njit

    from numba_onnx_ops.ops.pow import powmath

    @njit
    def run(t, out, n):
        powmath.narrow_exp2_vectors(t, out, n)

    return run


def _narrow_exp2(t: np.ndarray, out: np.ndarray, n: int) -> None:
    _narrow_exp2_kernel()(t, out, n)


@pytest.mark.skipif(vector_bits() != 512, reason="the permute lookup is AVX-512's")
@pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
def test_float32_exp_vectors_end_without_a_scalar_tail(dtype, rng):
    """float32 bases' 2**t on AVX-512 runs 8 lanes at a time, the last n % 8 elements of a
    block masked: each element gets the bits it gets in a full vector, from a ``t`` of just n
    elements, and nothing past n is written."""
    t = rng.uniform(-200.0, 200.0, 64)
    whole = np.empty(t.size, dtype)
    _narrow_exp2(t, whole, t.size)
    for n in range(1, 26):
        out = np.full(t.size, -1.0, dtype)
        _narrow_exp2(t[:n].copy(), out, n)
        assert np.array_equal(out[:n].view(np.uint8), whole[:n].view(np.uint8)), n
        assert (out[n:] == -1.0).all(), n


@pytest.mark.skipif(vector_bits() != 512, reason="the permute lookup is AVX-512's")
def test_float32_exp_by_table_is_accurate(rng):
    """float32 bases' 2**t on AVX-512 (a table of 2**(j/16) read by permutes): within 2**-51
    of 2**t (mpmath at 100 bits), over |t| <= 200, every table index next to every power of
    two and the points where the index changes; the table holds 2**(j/16) correctly
    rounded."""
    mpmath = pytest.importorskip("mpmath")
    from numba_onnx_ops.ops.pow import powmath

    n = np.arange(-200 * 16, 200 * 16 + 1)
    t = np.concatenate([rng.uniform(-200.0, 200.0, 5_000), n / 16, (n + 0.5) / 16])
    t = np.clip(np.concatenate([t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf)]), -200, 200)
    out = np.empty_like(t)
    _narrow_exp2(t, out, t.size)
    with mpmath.workprec(100):
        for j in range(16):
            assert powmath.EXP2_16[j] == float(mpmath.power(2, mpmath.mpf(j) / 16))
        worst = max(
            abs(mpmath.mpf(float(r)) / mpmath.power(2, mpmath.mpf(float(v))) - 1)
            for v, r in zip(t, out, strict=True)
        )
    assert worst <= mpmath.mpf(2) ** -51, float(mpmath.log(worst, 2))


# An AVX2 CPU as numba would compile for it (LLVM's znver3, AVX-512 off).
_AVX2_FEATURES = (
    "+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+cx8,+f16c,+fma,+fxsr,+lzcnt,+mmx,+movbe,"
    "+popcnt,+sahf,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+sse4a,+ssse3,+xsave"
)
_F64_BITS_SCRIPT = """
import sys
import numpy as np
import numba_onnx_ops as noo
from numba_onnx_ops.runtime.cpu import vector_bits
rng = np.random.default_rng(7)
x = np.exp2(rng.uniform(-1000, 1000, 50_000)) * rng.choice([-1.0, 1.0], 50_000)
y = rng.uniform(-3, 3, x.size)
y[::5] = np.round(y[::5])
z = np.abs(x)
z[3::997] = 0.0  # blocks that take the full path
results = [noo.pow(x, 3.7), noo.pow(z, -0.3), noo.pow(x, y), noo.pow(z, y)]
np.save(sys.argv[1], np.stack(results).view(np.uint64))
print(vector_bits())
"""


@pytest.mark.skipif(vector_bits() != 512, reason="compares AVX-512's kernels with AVX2's")
def test_float64_bits_do_not_depend_on_the_vector_width(tmp_path):
    """float64 x ** y on AVX-512 looks the exp tables up by permutes, elsewhere it gathers
    them: the same inputs give the same bits in a process that compiles for an AVX2 CPU."""

    def run(name, env):
        out = tmp_path / f"{name}.npy"
        env = {"NUMBA_CACHE_DIR": str(tmp_path / name), **env}
        stdout = run_python(_F64_BITS_SCRIPT, out, env=env, timeout=600)
        return stdout.split()[-1], np.load(out)

    bits512, wide = run("avx512", {})
    bits256, narrow = run(
        "avx2", {"NUMBA_CPU_NAME": "znver3", "NUMBA_CPU_FEATURES": _AVX2_FEATURES}
    )
    assert (bits512, bits256) == ("512", "256")
    assert np.array_equal(wide, narrow)
