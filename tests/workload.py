"""Calls that reach the package's own kernels, checked against the oracles.

The thread, fork, spawn and cache tests run these (in the test process and in children).
float32/float64 2-D products go to numpy's BLAS and would test nothing of the package, so
the products here are integer ones (``matmul_direct``), a float16 one (the same kernel
widening halves in registers), long batches of small float32 matrices (8x8x8 multiplied
whole, ``matmul_whole``, and 16x48x16, K past what is multiplied whole, on the vector
micro-kernel ``matmul_vector``; the plain kernels where the CPU has no vector micro-kernel)
and an int64 matrix-vector product (``matmul_rows_dot``); the powers take the general
float32 kernel, integer powers and the integer base with float exponents.

Each case runs where its size sends it (``tuning.MATMUL_HERE_MAX``, ``POW_HERE_MAX``): small
ones on the calling thread (the Pow kernels of the calling thread, the MatMul kernels' serial
twins), larger ones on the pool, none at its crossover; the kernels of both places are in the
workload, some of them in both.  Shapes stay small: in a child with a
cold cache each kernel compiles once.
"""

from __future__ import annotations

import numpy as np
from oracles import (
    F16,
    F32,
    I32,
    I64,
    assert_matmul_close,
    assert_pow_matches,
    random_array,
)

import numba_onnx_ops as nox

POOL, HERE = "pool", "here"

#: (name, operator, the kernels the front layer may run for it: one, by the CPU's vector
#: width; where it runs: on the pool, or on the calling thread)
CASES = [
    ("matmul int32 (2,9,20)@(20,33)", "matmul", ("matmul_direct",), HERE),
    ("matmul float16 (2,9,20)@(20,33)", "matmul", ("matmul_direct",), HERE),
    ("matmul float32 (2048,8,8)@(2048,8,8)", "matmul", ("matmul_whole", "matmul_small"), POOL),
    ("matmul int64 (40,30)@(30,)", "matmul", ("matmul_rows_dot",), HERE),
    ("pow float32 ^ 3.7", "pow", ("pow_general",), HERE),
    ("pow int32 ^ 5", "pow", ("pow_ipow",), HERE),
    ("pow int64 ^ float64", "pow", ("pow_general",), HERE),
    ("matmul float32 (512,16,48)@(512,48,16)", "matmul", ("matmul_vector", "matmul_direct"), POOL),
    ("matmul int32 (3,64,64)@(64,64)", "matmul", ("matmul_direct",), POOL),
    ("pow float32 (3,6000) ^ 3.7", "pow", ("pow_general",), POOL),
    ("pow int32 (6,3000) ^ 5", "pow", ("pow_ipow",), POOL),
]


def operands(seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The inputs of every case, deterministic per seed."""
    rng = np.random.default_rng(seed)
    x32 = np.abs(random_array(rng, (7, 45), F32, scale=3))
    return [
        (CASES[0][0], random_array(rng, (2, 9, 20), I32), random_array(rng, (20, 33), I32)),
        (CASES[1][0], random_array(rng, (2, 9, 20), F16), random_array(rng, (20, 33), F16)),
        (CASES[2][0], random_array(rng, (2048, 8, 8), F32), random_array(rng, (2048, 8, 8), F32)),
        (CASES[3][0], random_array(rng, (40, 30), I64), random_array(rng, (30,), I64)),
        (CASES[4][0], x32, np.array(3.7, F32)),
        (CASES[5][0], rng.integers(-90, 90, (6, 50), dtype=I32), np.array(5, I32)),
        (CASES[6][0], rng.integers(-40, 40, (4, 16), dtype=I64), rng.uniform(-3, 9, 16)),
        (
            CASES[7][0],
            random_array(rng, (512, 16, 48), F32),
            random_array(rng, (512, 48, 16), F32),
        ),
        (CASES[8][0], random_array(rng, (3, 64, 64), I32), random_array(rng, (64, 64), I32)),
        (CASES[9][0], np.abs(random_array(rng, (3, 6000), F32, scale=3)), np.array(3.7, F32)),
        (CASES[10][0], rng.integers(-90, 90, (6, 3000), dtype=I32), np.array(5, I32)),
    ]


#: The cases a child with a cold cache (or compiling serial twins) runs: one of each kind of
#: product, and Pow, on the calling thread and on the pool; each compiles in seconds there.
FEW = (CASES[0][0], CASES[2][0], CASES[4][0], CASES[8][0], CASES[9][0])


def run(seed: int, names=None) -> list[np.ndarray]:
    """The results of the cases named (default: every case)."""
    ops = {"matmul": nox.matmul, "pow": nox.pow}
    return [
        ops[op](a, b)
        for (name, op, _, _), (_, a, b) in zip(CASES, operands(seed), strict=True)
        if names is None or name in names
    ]


def check(seed: int, results: list[np.ndarray] | None = None, names=None) -> None:
    """Assert the results of the cases named (computed now unless given) against the oracles."""
    results = run(seed, names) if results is None else results
    chosen = [
        (case, args)
        for case, args in zip(CASES, operands(seed), strict=True)
        if names is None or case[0] in names
    ]
    for ((name, op, _, _), (_, a, b)), got in zip(chosen, results, strict=True):
        if op == "matmul":
            assert_matmul_close(got, a, b, what=name)
        else:
            assert_pow_matches(got, a, b, what=name)
