"""The exact chain of fused multiply-adds that MatMul's bit tests compare against: its integer
steps on cases whose rounding is known by hand, and its vectorized float32 construction
against those integer steps."""

from __future__ import annotations

import math

import numpy as np
import pytest
from oracles import BF16, F16, F32, F64, FORMATS, _fma_chain_exact, _fma_chain_float32

TINY = math.ldexp(1.0, -1074)  # the least float64 subnormal
MAX64 = float(np.finfo(np.float64).max)


def _fma64(x: float, y: float, acc: float) -> float:
    """fma(x, y, acc) in float64 through the oracle's integer steps: a one-term chain over
    K = 2 whose first term puts ``acc`` in the accumulator."""
    a = np.array([[1.0, x]])
    b = np.array([[acc], [y]])
    return float(_fma_chain_exact(a, b, F64)[0, 0])


@pytest.mark.parametrize(
    "x, y, acc, want",
    [
        # the product's low bits survive where a multiply and an add would lose them
        (1 + 2**-52, 1 - 2**-52, -1.0, -(2.0**-104)),
        (1 + 2**-52, 1 + 2**-52, 0.0, 1 + 2**-51),
        # halfway cases to even: 1 + 2**-53 to 1, 1 + 3 * 2**-53 to 1 + 2**-51
        (2.0**-53, 1.0, 1.0, 1.0),
        (3 * 2.0**-53, 1.0, 1.0, 1 + 2**-51),
        (-(2.0**-53), 1.0, -1.0, -1.0),
        # subnormal results: half of the least subnormal ties to 0, three quarters round up
        (TINY, 0.5, 0.0, 0.0),
        (TINY, 0.75, 0.0, TINY),
        (TINY, 1.5, TINY, 2 * TINY),
        (TINY, 1.5, 2 * TINY, 4 * TINY),
        (TINY, 1.25, 2 * TINY, 3 * TINY),
        # an exact zero is +0; past the largest finite value, infinity
        (2.0, -3.0, 6.0, 0.0),
        (MAX64, 2.0, 0.0, math.inf),
        (MAX64, -1.0, -MAX64, -math.inf),
    ],
)
def test_integer_steps_round_once_to_nearest_even(x, y, acc, want):
    got = _fma64(x, y, acc)
    assert got == want and math.copysign(1, got) == math.copysign(1, want), (got, want)


def test_an_overflowed_sum_stays_infinite():
    a = np.array([[np.finfo(np.float32).max, 1.0]], np.float32)
    b = np.array([[2.0], [-1.0]], np.float32)
    for chain in (_fma_chain_exact(a, b, F32), _fma_chain_float32(a, b)):
        assert chain.dtype == F32 and chain[0, 0] == np.inf


def _adversarial(rng, dtype, m, k, n):
    """Operands whose chains hit every rounding case: mixed magnitudes and signs, products
    that cancel the running sum, halfway cases, results in the subnormal range."""
    p, emin, _ = FORMATS[dtype]
    a = rng.standard_normal((m, k)) * 2.0 ** rng.integers(-12, 13, (m, k))
    b = rng.standard_normal((k, n)) * 2.0 ** rng.integers(-12, 13, (k, n))
    a[0, :] = 1.0  # row 0: a plain sum of B's column, K terms of one rounding each
    b[:, 0] = [2.0 ** -(p + 1) if kk % 2 else 1.0 for kk in range(k)]  # halfway, repeatedly
    b[1::2, 1] = -b[0:-1:2, 1] * (1 + 2.0 ** -(p - 1))  # near-cancellation, column 1
    a[1, :] = 2.0 ** (emin - 8)  # row 1 times small B: subnormal sums
    if dtype == F32:
        # row 3, column 3: 1 + 2**-23, then a product of 2**-24 * (1 - 2**-46): the sum lies
        # just below a float32 halfway point, and a float64 sum rounded to nearest would be
        # that point, which rounds to even (up): the case the rounding to odd is there for
        a[3, :], b[:, 3] = 0.0, 0.0
        a[3, :2] = [1.0, 2.0**-24 * (1 + 2.0**-23)]
        b[:2, 3] = [1 + 2.0**-23, 1 - 2.0**-23]
    a = a.astype(dtype)
    b = b.astype(dtype)
    b[:, 2] = -a[2, :]  # column 2: row 2's products are -a**2, exact in the accumulator
    return a, b


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_the_float32_construction_is_the_integer_chain(dtype):
    rng = np.random.default_rng(5)
    for m, k, n in [(7, 9, 5), (4, 33, 6), (4, 2, 4)]:
        a, b = _adversarial(rng, dtype, m, k, n)
        want = _fma_chain_exact(a, b, F32)
        got = _fma_chain_float32(a, b)
        assert got.dtype == want.dtype == F32
        assert got.tobytes() == want.tobytes(), np.argwhere(
            got.view(np.int32) != want.view(np.int32)
        )
