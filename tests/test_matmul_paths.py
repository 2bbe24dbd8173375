"""Every MatMul dispatch path, exercised on purpose and checked against exact or float64 oracles.

The front layer picks one of: ``matmul_vector`` (float32/float64 on the vector micro-kernel),
``matmul_whole``, ``matmul_direct``, ``matmul_small``, ``matmul_packed``, ``matmul_rows_dot``,
``matmul_cols_axpy``, numpy's BLAS (float32/float64 matrix-vector and narrow products), and for
large half-type products float32 panels (``widen_panels``, the micro-kernel or, narrower than
a vector, BLAS, ``narrow_panel``) or, for bfloat16 on CPUs with AVX512_BF16, pair dot products
(``pack_bf16_pairs``, then ``matmul_vector`` storing bfloat16).  Each case
below names the path it must take (a spy on the launches records it), so a change of the
dispatch rules cannot silently leave a kernel untested.  Sizes sit on and around the kernels'
block sizes (micro-tiles 4x3, k padding 8, row blocks 4, column strips of one and two
vectors, K blocks), layouts cover Fortran order, negative and non-unit strides and broadcast
batches.  Integers are compared exactly (Python integers reduced modulo 2**bits); floats
against a float64 product with the error bound of any summation order.
"""

from __future__ import annotations

import importlib
import re

import ml_dtypes
import numba
import numpy as np
import pytest
from numba.core import config as numba_config
from oracles import assert_matmul_close, assert_same_values, matmul_exact_int, round_to_format
from spies import GeneralOut, Launches, spy_on_kernels

import numba_onnx_ops as noo

blas = importlib.import_module("numba_onnx_ops.ops.matmul.blas")
decisions = importlib.import_module("numba_onnx_ops.ops.matmul.decisions")
half = importlib.import_module("numba_onnx_ops.ops.matmul.half_panels")
pairs = importlib.import_module("numba_onnx_ops.ops.matmul.bf16_pairs")
own = importlib.import_module("numba_onnx_ops.ops.matmul.own")
parallel = importlib.import_module("numba_onnx_ops.runtime.parallel")
pool = importlib.import_module("numba_onnx_ops.runtime.pool")
tuning = importlib.import_module("numba_onnx_ops.tuning")
kernels = importlib.import_module("numba_onnx_ops.ops.matmul.kernels")
plans = importlib.import_module("numba_onnx_ops.core.plans")

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
I32, I64, U32, U64 = (np.dtype(t) for t in (np.int32, np.int64, np.uint32, np.uint64))
INTS = (I32, I64, U32, U64)
HALVES = (F16, BF16)

_NAMES = {
    "matmul_direct": "direct",
    "matmul_small": "small",
    "matmul_vector": "vector",
    "matmul_packed": "packed",
    "matmul_rows_dot": "rows_dot",
    "matmul_cols_axpy": "cols_axpy",
    "widen_panels": "widen",
    "narrow_panel": "narrow",
    "pack_bf16_pairs": "pairs",
    "matmul_whole": "whole",
    "matmul_row_columns": "row_columns",
    "blas": "blas",
}


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)


@pytest.fixture
def paths(monkeypatch) -> Launches:
    """The list of paths the calls inside the test took, in order, wherever their kernels ran
    (on the pool, or on the calling thread as serial twins); ``paths.places`` says where each
    ran ("pool", "here" or "blas"; ``spies.py``)."""
    seen = Launches()
    spy_on_kernels(monkeypatch, lambda name, place: seen.add(_NAMES[name], place))
    return seen


@pytest.fixture
def own_floats(monkeypatch):
    """float32/float64 products of any batch go to the own kernels (where the layout lets
    BLAS take them, the dispatch otherwise prefers numpy's BLAS up to long batches)."""
    monkeypatch.setattr(tuning, "OWN_MIN_BATCH", {F32: 0, F64: 0})
    monkeypatch.setattr(tuning, "OWN_MAX_MNK", {F32: 1 << 62, F64: 1 << 62})


@pytest.fixture
def no_vector(monkeypatch):
    """As on a CPU without AVX2 and FMA: float products take the plain own kernels."""
    monkeypatch.setattr(own, "vector_tile", lambda dtype, n: (None, 0))
    monkeypatch.setattr(own, "whole_function", lambda *args: None)


@pytest.fixture
def no_pairs(monkeypatch):
    """As on a CPU without AVX512_BF16: bfloat16 products take the float32 paths."""
    monkeypatch.setattr(pairs, "pairs_win", lambda m, n, k: False)


@pytest.fixture
def no_whole(monkeypatch):
    """Tiny matrices take the blocked micro-kernel instead of whole-matrix code."""
    monkeypatch.setattr(own, "whole_function", lambda *args: None)


@pytest.fixture(params=[512, 256], ids=["avx512", "avx2"])
def vector_width(request, monkeypatch):
    """The micro-kernel's tiles for each register width, whatever the host has (LLVM splits
    wider vectors than the CPU's, so the results hold on any x86-64 CPU)."""
    caches = (own.vector_tile, own.whole_function)  # (other fixtures may replace them)
    monkeypatch.setattr(own, "vector_bits", lambda: request.param)
    monkeypatch.setattr(own, "vector_int64", lambda: request.param == 512)  # AVX-512DQ
    for cached in caches:
        cached.cache_clear()
    yield request.param
    for cached in caches:
        cached.cache_clear()


VECTOR = "vector" if own.vector_bits() else "small"  # where long batches go
FLOATS = "vector" if own.vector_bits() else "blas"  # where single float products go
PANELS = "vector" if own.vector_bits() else "blas"  # what multiplies half types' float32 panels
TINY = "whole" if own.vector_bits() else "small"  # where long batches of 8x8 go


# ------------------------------------------------------------------------------------------
# oracles
# ------------------------------------------------------------------------------------------
def operand(rng, shape, dtype, layout="C"):
    """Random values of ``dtype`` in ``shape``, laid out as ``layout``.

    Layouts: "C"; "F" (Fortran order); "neg" (both matrix axes reversed); "step" (every
    other element of a larger array along both matrix axes).
    """
    if dtype in INTS:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    else:
        x = rng.uniform(-2, 2, size=shape).astype(dtype)
    if layout == "C":
        return x
    if layout == "F":
        return np.asfortranarray(x)
    if layout == "neg":
        big = np.empty_like(x)
        big[...] = x[..., ::-1, ::-1] if x.ndim >= 2 else x[::-1]
        return big[..., ::-1, ::-1] if x.ndim >= 2 else big[::-1]
    if layout == "step":
        big = np.zeros(shape[:-2] + (2 * shape[-2], 2 * shape[-1]), dtype)
        big[..., ::2, ::2] = x
        return big[..., ::2, ::2]
    raise ValueError(layout)


def assert_int_exact(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    want = matmul_exact_int(a, b)
    assert got.dtype == a.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def assert_float_close(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """|got - exact| <= K * eps(acc) * (|A| @ |B|) + half an ulp of the output format."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = np.matmul(a64, b64)
    bound_sum = np.matmul(np.abs(a64), np.abs(b64))
    k = a.shape[-1]
    acc_eps = np.finfo(np.float64 if a.dtype == F64 else np.float32).eps
    tol = 2 * k * acc_eps * bound_sum
    if a.dtype in HALVES:
        half_ulp, subnormal = (2.0**-11, 2.0**-25) if a.dtype == F16 else (2.0**-8, 2.0**-134)
        tol = tol + half_ulp * np.abs(want) + subnormal
    assert got.dtype == a.dtype and got.shape == want.shape
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= tol), f"max excess {np.max(err - tol)}"


def check(a: np.ndarray, b: np.ndarray, **kwargs) -> np.ndarray:
    got = noo.matmul(a, b, **kwargs)
    if a.dtype in INTS:
        assert_int_exact(got, a, b)
    else:
        assert_float_close(got, a, b)
    return got


# ------------------------------------------------------------------------------------------
# the paths
# ------------------------------------------------------------------------------------------
# (A shape, B shape) around the direct kernel's blocks: rows 4 at a time, strips of two
# vectors (16 float32/int32 columns, 8 float64/int64), K of any length up to its limit.
DIRECT_SHAPES = [
    ((2, 2), (2, 17)),
    ((3, 5), (5, 16)),
    ((4, 7), (7, 3)),
    ((5, 9), (9, 33)),
    ((13, 31), (31, 31)),
    ((17, 1), (1, 40)),
    ((2, 9, 3), (2, 3, 19)),
]


@pytest.mark.parametrize("shapes", DIRECT_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_direct_integers(paths, rng, no_vector, dtype, shapes):
    check(operand(rng, shapes[0], dtype), operand(rng, shapes[1], dtype))
    assert paths == ["direct"]


# matmul_whole: tiny matrices in straight-line code, for each register width.  The sums run
# in the order of the blocked micro-kernel's (one FMA per term, in order of k), so the two
# paths agree bit for bit.
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_whole_products(paths, rng, own_floats, vector_width, dtype, monkeypatch):
    lanes = vector_width // (8 * dtype.itemsize)
    took = 0
    for m in (2, 3, 8, 9, 16, 17):
        for k in (1, 2, 5, 8, 9, 32, 33):
            for n in (lanes // 2, lanes, 2 * lanes, 3 * lanes):
                b = operand(rng, (1, k, n), dtype)  # broadcast: every entry the same B
                dense = operand(rng, (5, m, k), dtype)
                apart = operand(rng, (5, m, k + 3), dtype)[..., :k]  # rows k + 3 apart
                for a in (dense, apart):
                    # (B narrower than a 32-byte vector, where no whole-matrix code takes
                    # it, is padded to that width)
                    code = own.whole_function(dtype, m, n, k) or own.whole_function(
                        dtype, m, max(n, 32 // dtype.itemsize), k
                    )
                    paths.clear()
                    got = check(a, b)
                    if code is None:
                        assert "whole" not in paths, (m, k, n)
                        continue
                    took += 1
                    assert paths == ["whole"], (m, k, n, paths)
                    with monkeypatch.context() as blocks:
                        blocks.setattr(own, "whole_function", lambda *args: None)
                        plans.clear()  # (the plan of this call took the whole-matrix code)
                        paths.clear()
                        assert_same_values(got, noo.matmul(a, b))
                        assert paths and "whole" not in paths, (m, k, n, paths)
                    plans.clear()
    assert took >= 40  # the shapes above do reach the whole-matrix code


def test_whole_products_need_numbas_code_libraries(paths, rng, own_floats, monkeypatch):
    # Where this numba's code generator differs from the versions checked, no whole-matrix
    # code is made and tiny products take the blocked path, with the same values.
    a, b = operand(rng, (64, 8, 8), F32), operand(rng, (64, 8, 8), F32)
    got = check(a, b)
    assert paths == [TINY]
    monkeypatch.setattr(own, "native_function", lambda name, define: None)
    monkeypatch.setattr(own, "_whole_code", {})
    own.whole_function.cache_clear()
    plans.clear()  # (the plan of the first call took the whole-matrix code)
    try:
        paths.clear()
        assert_same_values(got, check(a, b))
        assert "whole" not in paths
    finally:
        own.whole_function.cache_clear()


def test_whole_needs_unit_column_strides(paths, rng, own_floats):
    a = operand(rng, (64, 8, 8), F32, "step")  # A's column stride 2
    check(a, operand(rng, (64, 8, 8), F32))
    assert "whole" not in paths


@pytest.mark.parametrize("layout_a", ["C", "F", "neg", "step"])
@pytest.mark.parametrize("layout_b", ["C", "F", "neg", "step"])
def test_direct_layouts(paths, rng, layout_a, layout_b):
    a = operand(rng, (3, 6, 11), I32, layout_a)
    b = operand(rng, (3, 11, 21), I32, layout_b)
    check(a, b)
    assert paths == ["direct"]


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_direct_float_batches(paths, rng, own_floats, no_vector, dtype):
    check(operand(rng, (5, 21, 19), dtype), operand(rng, (5, 19, 35), dtype))
    assert paths == ["direct"]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_direct_small_halves(paths, rng, dtype):
    check(operand(rng, (2, 9, 13), dtype), operand(rng, (2, 13, 20), dtype))
    assert paths == ["direct"]


def test_direct_broadcast_batches(paths, rng, no_vector):
    a = operand(rng, (4, 1, 6, 9), I64)
    b = operand(rng, (1, 3, 9, 10), I64)
    got = check(a, b)
    assert got.shape == (4, 3, 6, 10)
    assert paths == ["direct"]


def test_direct_zero_stride_batch(paths, rng):
    a = np.broadcast_to(operand(rng, (7, 5), U32), (3, 7, 5))  # stride 0 along the batch
    check(a, operand(rng, (3, 5, 18), U32))
    assert paths == ["direct"]


# matmul_small: N of one to two vectors, B rows contiguous; the last strip is shifted left.
@pytest.mark.parametrize(
    "dtype, n", [(F32, 8), (F32, 9), (F32, 15), (I32, 12), (U32, 8), (F64, 4), (I64, 7), (U64, 5)]
)
@pytest.mark.parametrize("m", [2, 3, 4, 7, 8, 9, 12, 15, 16])
def test_small_batches(paths, rng, own_floats, no_vector, dtype, n, m):
    check(operand(rng, (6, m, 7), dtype), operand(rng, (6, 7, n), dtype))
    assert paths == ["small"]


def test_small_half_and_strided_a(paths, rng):
    a = operand(rng, (4, 5, 6), F16, "F")
    check(a, operand(rng, (4, 6, 8), F32).astype(F16))
    assert paths == ["small"]


def test_small_needs_unit_column_stride(paths, rng):
    b = operand(rng, (4, 6, 8), I32, "F")  # column stride 6: the direct kernel copies strips
    check(operand(rng, (4, 5, 6), I32), b)
    assert paths == ["direct"]


# matmul_packed: long K (past the direct kernel's strip limit) and large half products.
def test_packed_long_k_integers(paths, rng, no_vector):
    k = tuning.DIRECT_KMAX + 77
    for dtype in (I32, U64):
        paths.clear()
        check(operand(rng, (3, k), dtype), operand(rng, (k, 5), dtype))
        assert paths == ["packed"]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("layout", ["C", "F", "neg"])
def test_packed_halves(paths, rng, no_pairs, dtype, layout):
    # 7 x 650 x 70 > 2**18 multiply-adds, rows too few to widen; sizes off the 4x3 micro-tile
    # and the k padding
    a = operand(rng, (7, 650), dtype, layout)
    b = operand(rng, (650, 70), dtype, layout)
    check(a, b)
    assert paths == ["packed"]


# mid-size float16/bfloat16 products: widened whole on the calling thread, the float32 plan
@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("layout", ["C", "F", "neg", "step"])
def test_widened_halves(paths, rng, no_pairs, dtype, layout):
    # 70 x 65 x 71: past the direct kernel's 2**18 multiply-adds, short of the panels'
    if not own.vector_bits():
        pytest.skip("no vector micro-kernel: the packed kernel takes these")
    a = operand(rng, (70, 65), dtype, layout)
    b = operand(rng, (65, 71), dtype, "F" if layout == "C" else layout)
    check(a, b)
    assert paths == ["widen", PANELS, "narrow"]
    assert paths.places == ["here"] * 3  # (the product too, up to HALF_WIDEN_HERE_MAX)


def test_widened_halves_multiply_on_the_pool_when_large(paths, rng, no_pairs, monkeypatch):
    if not own.vector_bits():
        pytest.skip("no vector micro-kernel: the packed kernel takes these")
    monkeypatch.setattr(tuning, "HALF_WIDEN_HERE_MAX", 0)
    check(operand(rng, (70, 65), F16), operand(rng, (65, 71), F16))
    assert paths == ["widen", PANELS, "narrow"]
    want = "pool" if numba.config.NUMBA_NUM_THREADS > 1 else "here"
    assert paths.places == ["here", want, "here"]


def test_packed_half_batches_broadcast(paths, rng, no_pairs):
    # fewer rows than the widened path takes (HALF_WIDEN_MIN_ROWS)
    a = operand(rng, (2, 1, 7, 300), BF16)
    b = operand(rng, (3, 300, 130), BF16)
    check(a, b)
    assert paths == ["packed"]


# batches of mid-size half products: widened whole (operands of other layouts copied
# C-contiguous first), one float32 batch on the calling thread, narrowed
@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("layout", ["C", "F", "step"])
def test_widened_half_batches(paths, rng, no_pairs, dtype, layout):
    # 67 x 73 x 61: past the direct kernel's 2**18 multiply-adds a matrix, short of the panels'
    if not own.vector_bits():
        pytest.skip("no vector micro-kernel: the packed kernel takes these")
    a = operand(rng, (2, 1, 67, 73), dtype, layout)
    b = operand(rng, (3, 73, 61), dtype, "C" if layout == "F" else layout)
    check(a, b)
    assert paths == ["widen", PANELS, "narrow"]
    # (six products: past HALF_WIDEN_HERE_MAX in all, the float32 batch goes to the pool)
    want = "pool" if numba.config.NUMBA_NUM_THREADS > 1 else "here"
    assert paths.places == ["here", want, "here"]


def test_packed_k_blocks(paths, rng, monkeypatch):
    # force several K blocks, M and N chunks with a small block choice
    monkeypatch.setattr(own, "packed_blocks", lambda item, nb, m, n, k: (37, 26, 40, 8))
    monkeypatch.setattr(tuning, "HALF_WIDEN_MIN_ROWS", 1 << 62)  # (else widened whole)
    a = operand(rng, (2, 75, 130), F16)
    b = operand(rng, (2, 130, 53), F16)
    check(a, b)
    assert paths == ["packed"]


@pytest.mark.parametrize("dtype", INTS + (F32, F64), ids=str)
def test_packed_every_type(paths, rng, monkeypatch, no_vector, dtype):
    monkeypatch.setattr(tuning, "DIRECT_KMAX", 8)  # send everything with K > 8 to packed
    a = operand(rng, (2, 11, 29), dtype, "F")
    b = operand(rng, (2, 29, 14), dtype, "neg")
    check(a, b)
    assert paths == ["packed"]


# large float16/bfloat16 products: float32 panels on the micro-kernel
@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("layout", ["C", "F", "neg", "step"])
def test_half_panels(no_pairs, paths, rng, monkeypatch, dtype, layout):
    monkeypatch.setattr(tuning, "HALF_PANELS_MIN", 1000)
    a = operand(rng, (70, 65), dtype, layout)
    b = operand(rng, (65, 71), dtype, "F" if layout == "C" else "C")
    check(a, b)
    assert paths == ["widen", PANELS, "narrow"]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_panels_narrower_than_a_vector_through_blas(no_pairs, paths, rng, monkeypatch, dtype):
    monkeypatch.setattr(tuning, "HALF_PANELS_MIN", 1000)
    check(operand(rng, (70, 65), dtype), operand(rng, (65, 3), dtype))
    assert paths == ["widen", "blas", "narrow"]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_panel_tiles_and_k_blocks(no_pairs, paths, rng, monkeypatch, dtype):
    # tiles of 16 rows/columns, K in blocks of 40: edge tiles, kept panels, partial sums
    monkeypatch.setattr(tuning, "HALF_PANELS_MIN", 1000)
    monkeypatch.setattr(half, "PANEL", 600)
    monkeypatch.setattr(half, "PANEL_MIN", 16)
    monkeypatch.setattr(half, "PANEL_KMAX", 40)
    a = operand(rng, (2, 1, 37, 90), dtype)
    b = operand(rng, (3, 90, 29), dtype, "neg")
    check(a, b)
    assert set(paths) == {"widen", PANELS, "narrow"}
    assert paths.count("narrow") == 2 * 3 * 3 * 2  # batch entries x row tiles x column tiles


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_panels_default_sizes(no_pairs, paths, rng, dtype):
    a = operand(rng, (700, 300), dtype)
    b = operand(rng, (300, 1300), dtype)
    check(a, b)
    assert paths == ["widen", PANELS, "narrow"]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_panels_keep_specials(no_pairs, rng, monkeypatch, dtype):
    monkeypatch.setattr(tuning, "HALF_PANELS_MIN", 1000)
    # small integers: every sum is exact in float32 (and float64), so the one rounding to the
    # half type is all there is; the oracle sums in float64 (not the sgemm under test)
    a = rng.integers(-2, 3, (20, 70)).astype(dtype)
    b = rng.integers(-2, 3, (70, 30)).astype(dtype)
    a[0, 0], a[1, 1], b[2, 2] = np.inf, np.nan, -np.inf
    a[:, 3], b[3, :] = 2, 60000  # float16: sums past its range, finite in float32
    got = noo.matmul(a, b)
    with np.errstate(over="ignore", invalid="ignore"):
        exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert_same_values(got, round_to_format(exact, dtype), signed_zeros=False)


# bfloat16 on AVX512_BF16: pair dot products (vdpbf16ps)
PAIRS_HW = pairs.pairs_supported()


def pair_order_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """bfloat16 ``a @ b`` as the pair dot products define it: float32 sums, the terms added one
    by one in the order k = 1, 0, 3, 2, ... (each ``acc + a_k * b_k`` rounded once to float32),
    rounded once to bfloat16.  Exact for operands whose magnitudes lie in [2**-7, 2**7] (or
    are zero) and K <= 2**10: every product and float32 sum plus a product is then a multiple
    of 2**-30 below 2**24, exact in float64, so the one cast to float32 is the one rounding."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    k = a.shape[-1]
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    acc = np.zeros(shape, np.float32)
    for p in range((k + 1) // 2):
        for kk in (2 * p + 1, 2 * p):
            if kk < k:
                acc = (acc + a64[..., :, kk : kk + 1] * b64[..., kk : kk + 1, :]).astype(F32)
    return acc.astype(BF16)


def wide_operand(rng, shape, layout="C"):
    """bfloat16 values of both signs from 2**-7 to 2**7: float32 sums of them depend on the
    order of the terms, which the pair order's oracle then tells apart."""
    x = rng.uniform(1, 2, shape) * 2.0 ** rng.integers(-7, 7, shape) * rng.choice([-1, 1], shape)
    return operand_like(x.astype(BF16), layout)


def operand_like(x, layout):
    return {"C": x, "F": np.asfortranarray(x), "neg": x[..., ::-1, ::-1].copy()[..., ::-1, ::-1],
            "step": _stepped(x)}[layout]  # fmt: skip


def _stepped(x):
    big = np.zeros(x.shape[:-2] + (2 * x.shape[-2], 2 * x.shape[-1]), x.dtype)
    big[..., ::2, ::2] = x
    return big[..., ::2, ::2]


@pytest.fixture
def small_pairs(monkeypatch):
    """Small bfloat16 products take the pairs too, so their edges can be checked, also on CPUs
    where the panels are faster."""
    monkeypatch.setattr(tuning, "PAIRS_MIN_MNK", 1)
    monkeypatch.setattr(pairs, "pairs_fast", lambda: True)


PAIR_SHAPES = [
    ((8, 2), (2, 32)),  # one register block, one pair
    ((9, 3), (3, 33)),  # odd K (the last pair's high half is zero), row and column edges
    ((70, 65), (65, 71)),
    ((1, 200), (200, 40)),
    ((33, 64), (64, 100)),  # six rows by four vectors, the last strip shifted
    ((5, 20), (20, 64)),  # fewer rows than one register block of six
    ((13, 31), (31, 128)),
    ((2, 1, 37, 90), (3, 90, 45)),  # broadcast batches
    ((2, 40, 30), (2, 30, 32)),  # few strips: each matrix's rows in even blocks, one launch
    ((2, 41, 30), (30, 32)),  # ... in blocks and a remainder, launches per matrix
]


@pytest.mark.skipif(not PAIRS_HW, reason="no AVX512_BF16")
@pytest.mark.parametrize("shapes", PAIR_SHAPES, ids=str)
@pytest.mark.parametrize("layout", ["C", "C and F", "F", "neg", "step"])
@pytest.mark.parametrize("where", ["calling thread", "pool"])
def test_bf16_pairs_exact_in_pair_order(
    paths, rng, small_pairs, monkeypatch, shapes, layout, where
):
    if where == "pool":  # (small products pack and multiply on the calling thread)
        monkeypatch.setattr(tuning, "PAIRS_PACK_HERE_MAX", 0)
        monkeypatch.setattr(tuning, "PAIRS_HERE_MAX", 0)
    a = wide_operand(rng, shapes[0], "C" if layout == "C and F" else layout)
    b = wide_operand(rng, shapes[1], "F" if layout == "C and F" else layout)
    got = noo.matmul(a, b)
    assert_same_values(got, pair_order_product(a, b))
    assert set(paths) == {"pairs", "vector"} and paths[0] == "pairs"
    assert paths.count("pairs") == 1  # (the whole batch packed in one launch)


@pytest.mark.skipif(not PAIRS_HW, reason="no AVX512_BF16")
def test_bf16_pairs_order_is_what_the_oracle_checks(rng):
    # The data above make the order of the float32 sums visible after rounding to bfloat16:
    # summed in order of k instead, many elements differ.
    a = wide_operand(rng, (64, 200))
    b = wide_operand(rng, (200, 64))
    in_order = np.zeros((64, 64), F32)
    for kk in range(200):
        in_order = (in_order + np.outer(a[:, kk], b[kk]).astype(np.float64)).astype(F32)
    assert (in_order.astype(BF16) != pair_order_product(a, b)).sum() > 10


@pytest.mark.skipif(not PAIRS_HW, reason="no AVX512_BF16")
def test_bf16_pairs_row_blocks(paths, rng, small_pairs, monkeypatch):
    monkeypatch.setattr(tuning, "PAIRS_HERE_MAX", 0)  # (the pool's launches)
    # 32 columns are one strip: the rows are split into blocks (each a batch entry of the
    # launch) so that every thread gets work, the remainder rows in a launch of their own.
    a = wide_operand(rng, (1001, 50))
    b = wide_operand(rng, (50, 32))
    assert_same_values(noo.matmul(a, b), pair_order_product(a, b))
    blocks = pairs._row_blocks(1001, 1, pairs.register_block(32)[0], numba.get_num_threads())
    assert sum(rb * count for _, rb, count in blocks) == 1001
    assert paths == ["pairs"] + ["vector"] * len(blocks)


@pytest.mark.skipif(not PAIRS_HW, reason="no AVX512_BF16")
def test_bf16_pairs_default_sizes(paths, rng, monkeypatch):
    monkeypatch.setattr(pairs, "pairs_fast", lambda: True)
    a = wide_operand(rng, (300, 256))
    b = wide_operand(rng, (256, 200))
    assert_same_values(noo.matmul(a, b), pair_order_product(a, b))
    assert set(paths) == {"pairs", "vector"} and paths[0] == "pairs"


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_bf16_batches_widened_whole(no_pairs, paths, rng, monkeypatch, dtype):
    # batches of smaller bfloat16 products from HALF_BATCH_MIN multiply-adds: widened whole,
    # one product, narrowed; float16 keeps the own kernels, as do batches below it and
    # operands with strides
    a, b = operand(rng, (4, 40, 33), dtype), operand(rng, (4, 33, 24), dtype)
    monkeypatch.setattr(tuning, "HALF_BATCH_MIN", 4 * 40 * 33 * 24)
    check(a, b)
    if dtype == BF16:
        assert paths == ["widen", FLOATS, "narrow"] if own.vector_bits() else ["direct"]
    else:
        assert "widen" not in paths
    paths.clear()
    monkeypatch.setattr(tuning, "HALF_BATCH_MIN", 4 * 40 * 33 * 24 + 1)
    plans.clear()
    check(a, b)
    check(operand(rng, (4, 40, 33), dtype, "F"), b)
    assert "widen" not in paths


def test_bf16_panels_where_pairs_are_slow(paths, rng, monkeypatch):
    # A CPU whose pair dot products do fewer multiply-adds per ns than its float32 FMAs keeps
    # the float32 panels at every size.
    monkeypatch.setattr(pairs, "pairs_fast", lambda: False)
    a = rng.integers(-30, 31, (300, 256)).astype(BF16)  # float32 sums exact, in any order
    b = rng.integers(-30, 31, (256, 200)).astype(BF16)
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert_same_values(noo.matmul(a, b), round_to_format(exact, BF16))
    assert paths == ["widen", PANELS, "narrow"]


def test_amd_zen_by_llvm_cpu_name(monkeypatch):
    from numba_onnx_ops.runtime import cpu as _cpu

    monkeypatch.setattr(_cpu, "cpu_name", lambda: "znver4")
    assert _cpu.amd_zen.__wrapped__()
    monkeypatch.setattr(_cpu, "cpu_name", lambda: "sapphirerapids")
    assert not _cpu.amd_zen.__wrapped__()


def test_halved_512_bit_fmas_only_on_zen_4(monkeypatch):
    from numba_onnx_ops.runtime import cpu as _cpu

    for name, halved in [("znver4", True), ("znver5", False), ("znver3", False),
                         ("sapphirerapids", False), ("rocketlake", False)]:  # fmt: skip
        monkeypatch.setattr(_cpu, "cpu_name", lambda name=name: name)
        assert _cpu.fma512_halved.__wrapped__() is halved


def test_pairs_fast_only_where_the_instruction_is(monkeypatch):
    monkeypatch.setattr(pairs, "pairs_supported", lambda: False)
    monkeypatch.setattr(pairs, "amd_zen", lambda: True)
    assert not pairs.pairs_fast.__wrapped__()
    monkeypatch.setattr(pairs, "pairs_supported", lambda: True)
    assert pairs.pairs_fast.__wrapped__()
    monkeypatch.setattr(pairs, "amd_zen", lambda: False)
    assert not pairs.pairs_fast.__wrapped__()


@pytest.mark.skipif(not PAIRS_HW, reason="no AVX512_BF16")
@pytest.mark.parametrize(
    "tiny_a, tiny_b",
    [
        (1e-39, 2.0**100),  # a subnormal input: the pairs would read it as zero
        (2.0**-60, 2.0**-70),  # normal inputs, a subnormal product: it would be flushed
    ],
)
def test_bf16_pairs_refuse_what_they_would_flush(paths, rng, small_pairs, tiny_a, tiny_b):
    a = np.zeros((40, 64), BF16)
    b = np.zeros((64, 48), BF16)
    a[3, 5], b[5, 7] = tiny_a, tiny_b
    a[4, :], b[:, 8] = 1, 1  # ordinary sums elsewhere
    got = noo.matmul(a, b)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert_same_values(got, round_to_format(want, BF16))
    assert got[3, 7] != 0
    assert paths == ["pairs", "vector", "widen", PANELS, "narrow"]


@pytest.mark.skipif(not PAIRS_HW, reason="no AVX512_BF16")
def test_bf16_pairs_refuse_one_matrix_of_a_batch(paths, rng, small_pairs):
    # A broadcast batch: the one matrix whose inputs the pairs would flush takes the panels, its
    # neighbours stay on the pairs, each in its own order.
    a = wide_operand(rng, (2, 1, 24, 40))
    b = wide_operand(rng, (3, 40, 48))
    a[1, 0, 2, 9] = 1e-39  # a subnormal input in A's second matrix
    got = noo.matmul(a, b)
    assert got.shape == (2, 3, 24, 48)
    pair_matrices = [(0, j) for j in range(3)]
    for i, j in pair_matrices:
        assert_same_values(got[i, j], pair_order_product(a[i, 0], b[j]))
    for j in range(3):
        assert_matmul_close(got[1, j], a[1, 0], b[j])
    assert paths.count("pairs") == 1
    assert paths.count("narrow") == 3


@pytest.mark.skipif(not PAIRS_HW, reason="no AVX512_BF16")
def test_bf16_pairs_boundary_of_the_check():
    # The smallest product the pairs take is 2**-110 (exponent fields summing to 144).
    m = 1
    emin = np.array([[127 - 55, 127 - 55], [127 - 55, 127 - 56], [0, 250]], np.uint32)
    # (the second matrix one exponent short; the third with a subnormal in A)
    assert pairs.inputs_safe(emin, m).tolist() == [True, False, False]


@pytest.mark.skipif(not PAIRS_HW, reason="no AVX512_BF16")
def test_bf16_pairs_keep_specials(rng, small_pairs):
    a = rng.integers(-2, 3, (20, 70)).astype(BF16)
    b = rng.integers(-2, 3, (70, 40)).astype(BF16)
    a[0, 0], a[1, 1], b[2, 2] = np.inf, np.nan, -np.inf
    a[:, 3], b[3, :] = 2.0**60, 2.0**60  # products far from the others, finite in float32
    got = noo.matmul(a, b)
    with np.errstate(over="ignore", invalid="ignore"):
        exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert_same_values(got, round_to_format(exact, BF16), signed_zeros=False)


# matrix-vector and vector-matrix
@pytest.mark.parametrize("dtype", INTS + HALVES + (F32,), ids=str)
@pytest.mark.parametrize("layout", ["C", "F", "neg"])
def test_rows_dot(paths, rng, own_floats, dtype, layout):
    a = operand(rng, (3, 37, 300), dtype, layout)
    x = operand(rng, (300,), dtype)
    got = check(a, x)
    assert got.shape == (3, 37)
    assert paths == ["rows_dot"]


@pytest.mark.parametrize("dtype", INTS + HALVES + (F32,), ids=str)
@pytest.mark.parametrize("layout", ["C", "F", "step"])
def test_cols_axpy(paths, rng, own_floats, dtype, layout):
    x = operand(rng, (2, 1, 150), dtype)
    b = operand(rng, (2, 150, 1100), dtype, layout)  # more than one task of columns
    got = check(x, b)
    assert got.shape == (2, 1, 1100)
    assert paths == ["cols_axpy"]


def test_vector_dot_vector(paths, rng):
    x = operand(rng, (1000,), I64)
    y = operand(rng, (1000,), I64)
    got = noo.matmul(x, y)
    assert got.shape == () and got == matmul_exact_int(x[None], y[:, None])[0, 0]
    assert paths == ["rows_dot"]


# float32/float64: the own kernels on CPUs with AVX2 and FMA (numpy's BLAS elsewhere); B
# narrower than a 32-byte vector padded to that width
WHOLE = "whole" if own.vector_bits() else "blas"
ROW = "cols_axpy" if own.vector_bits() else "blas"
DOT = "rows_dot" if own.vector_bits() else "blas"


@pytest.mark.parametrize(
    "dtype, shapes, path",
    [
        (F32, ((4, 4), (4, 4)), WHOLE),  # narrower than a vector: padded
        (F32, ((33, 7), (7, 3)), FLOATS),
        (F64, ((4, 4), (4, 4)), WHOLE),
        (F32, ((33, 7), (7, 9)), FLOATS),
        (F64, ((70, 80), (80, 90)), FLOATS),
        (F32, ((5, 7), (7,)), DOT),  # matrix-vector
        (F64, ((5, 7), (7, 1)), DOT),
        (F32, ((1, 700), (700, 700)), ROW),  # one row
        (F64, ((700,), (700, 9)), ROW),
    ],
    ids=str,
)
def test_float_products_by_shape(paths, rng, dtype, shapes, path):
    a, b = operand(rng, shapes[0], dtype), operand(rng, shapes[1], dtype)
    check(a, b)
    check(a, b, out=np.empty(np.matmul(a, b).shape, dtype))
    assert paths == [path, path]


@pytest.mark.parametrize(
    "dtype, a_shape, b_shape, path",
    [
        (F32, (70, 80), (80, 90), FLOATS),
        (F32, (3, 21, 19), (19, 35), FLOATS),
        (F32, (2, 1, 30, 40), (3, 40, 50), FLOATS),
        (F32, (3, 21, 19), (19, 5), FLOATS),  # narrow: padded
        (F32, (1024, 21, 19), (19, 5), "vector" if own.vector_bits() else "direct"),
        (F32, (1024, 8, 8), (1024, 8, 8), TINY),  # long batches of small matrices: own
        (F32, (1024, 40, 30), (30, 20), "vector" if VECTOR == "vector" else "direct"),
        (F64, (4096, 4, 16), (4096, 16, 4), VECTOR),  # (whole-matrix code where K = 16 is)
    ],
    ids=str,
)
def test_blas_or_own_by_batch(paths, rng, dtype, a_shape, b_shape, path):
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    if path == "vector" and own.whole_function(dtype, m, n, k) is not None:
        path = "whole"
    check(operand(rng, a_shape, dtype), operand(rng, b_shape, dtype))
    assert paths == [path]


@pytest.mark.skipif(not own.vector_bits(), reason="no AVX2+FMA: batches stay on BLAS")
@pytest.mark.parametrize(
    "dtype, a_shape, b_shape, path",
    [
        (F32, (2, 8, 8), (2, 8, 8), "whole"),
        (F32, (64, 128, 64), (64, 64, 128), "vector"),
        (F32, (8, 1, 256, 256), (1, 8, 256, 256), "vector"),
        (F32, (2, 384, 384), (2, 384, 384), "vector"),
        (F32, (2, 700, 700), (2, 700, 700), "vector"),
        (F64, (64, 64, 64), (64, 64, 64), "vector"),
        # narrow products: B padded to one vector of columns
        (F32, (2, 64, 64), (2, 64, 4), "vector"),
        (F32, (4096, 8, 8), (4096, 8, 4), "whole"),
    ],
    ids=str,
)
def test_vector_or_blas_by_work(paths, rng, dtype, a_shape, b_shape, path):
    check(operand(rng, a_shape, dtype), operand(rng, b_shape, dtype))
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    # (the micro-kernel runs long K as one call per block, longer with B's strips copied)
    kc = own.k_block(dtype, k, packed=own.packs_strips(dtype, m, k, n))
    assert paths == [path] * (-(-k // kc) if path == "vector" else 1)


def test_vector_takes_a_transposed_b(paths, rng):
    a = operand(rng, (64, 64, 64), F32)
    b = operand(rng, (64, 64, 64), F32).transpose(0, 2, 1)  # column stride 64: strips packed
    got = check(a, b)
    assert paths == [FLOATS]
    assert_same_values(got, noo.matmul(a, np.ascontiguousarray(b)))  # the same order


# matmul_vector: every tile of both register widths, on and around its edges.  Rows: blocks
# of 4, 6 or 8 (the last one clamped); columns: one, two or (AVX-512) four vectors of 8 or 16
# float32 (4 or 8 float64), the last strip shifted left; K from 1, and long enough for the
# kernel to prefetch the next block's C rows (``PREFETCH_MIN_K``).
VECTOR_SHAPES = [
    (m, n)
    for m in (2, 5, 6, 8, 9, 13, 17)
    for n in (4, 7, 8, 9, 15, 16, 17, 31, 33, 50, 64, 70, 100)
]


@pytest.mark.parametrize("k", [1, 3, 17, 70])
@pytest.mark.parametrize("dtype", [F32, F64, I64, U64], ids=str)
def test_vector_tile_edges(paths, rng, own_floats, vector_width, no_whole, dtype, k):
    lanes = vector_width // (8 * dtype.itemsize)
    narrowest = lanes // 2 if vector_width == 512 else lanes
    takes = dtype.kind == "f" or vector_width == 512  # 64-bit integers need AVX-512DQ
    for m, n in VECTOR_SHAPES:
        paths.clear()
        check(operand(rng, (3, m, k), dtype), operand(rng, (3, k, n), dtype))
        # (floats narrower than the narrowest tile: B padded to a 32-byte vector)
        wide = n >= narrowest or (dtype.kind == "f" and 32 // dtype.itemsize >= narrowest)
        assert (paths == ["vector"]) == (takes and wide), (m, n, paths)


@pytest.mark.parametrize("layout_a", ["C", "F", "neg", "step"])
def test_vector_layouts(paths, rng, own_floats, vector_width, layout_a):
    a = operand(rng, (4, 11, 21), F32, layout_a)
    b = operand(rng, (4, 21, 40), F32)
    rows_reversed = np.ascontiguousarray(b[:, ::-1])[:, ::-1]  # negative row stride, unit columns
    rows_apart = np.zeros((4, 42, 40), F32)
    rows_apart[:, ::2] = b
    for bb in (b, rows_reversed, rows_apart[:, ::2]):
        paths.clear()
        check(a, bb)
        check(a, bb, out=np.empty((4, 11, 40), F32))
        assert paths == ["vector", "vector"]


def test_vector_int64_layouts(paths, rng, vector_width):
    a = operand(rng, (2, 1, 9, 40), I64, "F")
    b = operand(rng, (3, 40, 35), I64)
    check(a, b, out=np.empty((2, 3, 9, 35), I64))
    check(operand(rng, (70, 33), U64, "step"), operand(rng, (33, 70), U64))
    assert paths == (["vector"] * 2 if vector_width == 512 else ["direct"] * 2)


def test_vector_broadcast_batches(paths, rng, own_floats, vector_width):
    a = operand(rng, (3, 1, 10, 9), F64)
    b = operand(rng, (1, 4, 9, 19), F64)
    got = check(a, b)
    assert got.shape == (3, 4, 10, 19)
    a = np.broadcast_to(operand(rng, (10, 9), F32), (5, 10, 9))  # stride 0 along the batch
    check(a, operand(rng, (5, 9, 33), F32))
    assert paths == ["vector", "vector"]


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_vector_exact_sums_and_specials(rng, own_floats, vector_width, dtype):
    # small integers: every partial sum is exact, so the result must equal the exact product;
    # infinities and NaN propagate as in IEEE arithmetic
    a = rng.integers(-3, 4, (6, 19, 40)).astype(dtype)
    b = rng.integers(-3, 4, (6, 40, 35)).astype(dtype)
    want = np.matmul(a.astype(object), b.astype(object)).astype(dtype)
    np.testing.assert_array_equal(noo.matmul(a, b), want)
    a[0, 0, 0], a[1, 2, 3], b[2, 4, 5] = np.inf, np.nan, -np.inf
    with np.errstate(invalid="ignore"):
        want = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    np.testing.assert_array_equal(noo.matmul(a, b), want)


@pytest.mark.parametrize("layout", ["neg", "step"])
def test_layouts_blas_cannot_take_are_own(paths, rng, layout):
    # numpy.matmul would fall back to its plain loop on these: the own kernel takes them
    a, b = operand(rng, (70, 80), F32, layout), operand(rng, (80, 90), F32)
    check(a, b)
    check(operand(rng, (80, 90), F32).T, operand(rng, (70, 80), F32).T)  # Fortran order
    assert paths == ["vector" if VECTOR == "vector" else "direct", FLOATS]


def test_plans_keep_every_check(paths, rng):
    a = operand(rng, (4, 3), F32)
    for _ in range(2):  # raised again by a repeated call: a bad call leaves no plan
        with pytest.raises(ValueError, match=r"\(4, 3\).*\(4, 4\)"):
            noo.matmul(a, operand(rng, (4, 4), F32))
        with pytest.raises(TypeError, match="same dtype"):
            noo.matmul(a, operand(rng, (3, 4), F64))
        with pytest.raises(ValueError, match="opset"):
            noo.matmul(a, operand(rng, (3, 4), F32), opset=0)
    assert paths == []  # nothing ran
    b = operand(rng, (3, 4), F32)
    for _ in range(2):
        got = noo.matmul(a, b.astype(">f4"))  # non-native byte order: converted on each call
        assert got.dtype == F32
        np.testing.assert_array_equal(got, noo.matmul(a, b))


@pytest.fixture
def checked(monkeypatch):
    """The shapes of A in the calls that went through the general checks, in order."""
    seen = []
    real_check = decisions.check

    def check_spy(*args):
        seen.append(args[0].shape)
        return real_check(*args)

    monkeypatch.setattr(decisions, "check", check_spy)
    return seen


def test_float_batches_are_checked_once_per_kind_of_call(paths, rng, checked):
    """The first call of a kind (dtypes, shapes, strides, flags, opset) makes the general
    path's checks and dispatch, and repeated calls of that kind take the path it chose without
    them: for a small float batch, a long one, and nothing for an empty batch.  A broadcast
    batch, K = 0 and an explicit opset are kinds of their own; a mismatch is checked, and
    raises, on every call."""
    a, b = operand(rng, (2, 16, 16), F32), operand(rng, (2, 16, 4), F32)
    long_batch = operand(rng, (4096, 8, 8), F64), operand(rng, (4096, 8, 8), F64)
    empty_batch = operand(rng, (0, 5, 3), F32), operand(rng, (0, 3, 4), F32)
    for _ in range(3):
        check(a, b)
        check(*long_batch)
        empty = noo.matmul(*empty_batch)
        assert empty.shape == (0, 5, 4) and empty.dtype == F32
    assert checked == [(2, 16, 16), (4096, 8, 8), (0, 5, 3)]
    assert paths == paths[:2] * 3  # the same paths on every call; nothing for the empty batch
    checked.clear()
    broadcast = operand(rng, (2, 16, 16), F32), operand(rng, (1, 16, 16), F32)
    k_zero = operand(rng, (2, 5, 0), F32), operand(rng, (2, 0, 4), F32)
    for _ in range(2):
        check(*broadcast)
        np.testing.assert_array_equal(noo.matmul(*k_zero), np.zeros((2, 5, 4), F32))
        check(*long_batch, opset=13)
    assert checked == [(2, 16, 16), (2, 5, 0), (4096, 8, 8)]
    for _ in range(2):
        with pytest.raises(ValueError, match="batch dimensions"):
            noo.matmul(a, operand(rng, (3, 16, 16), F32))
        with pytest.raises(ValueError, match="inner dimensions"):
            noo.matmul(a, operand(rng, (2, 8, 16), F32))
    assert len(checked) == 3 + 4


@pytest.mark.parametrize("dtype", [I32, I64, U32, F16, BF16], ids=str)
def test_other_dtypes_are_checked_once_per_kind_of_call(dtype, paths, rng, checked):
    """Products of the other dtypes, of every kind (2-D, batched, broadcast batches, vectors,
    K = 0), make the general path's checks on their kind's first call only, also with an
    ``out`` (its plan's own first call), and give the general path's results (an ``out`` of an
    ndarray subclass) bit for bit; errors are checked on every call."""
    kinds = [
        ((4, 4), (4, 4), "C"),
        ((33, 20), (20, 47), "F"),
        ((3, 9, 5), (3, 5, 17), "C"),
        ((2, 300, 256), (2, 256, 200), "step"),  # half types: the panels (or the pairs)
        ((2, 4, 3), (1, 3, 5), "C"),  # broadcast batch
        ((4, 3), (3,), "C"),  # a vector
        ((2, 3, 4, 3), (2, 3, 3, 5), "C"),  # two batch axes
        ((4, 0), (0, 5), "C"),  # K = 0
    ]
    for sa, sb, layout in kinds:
        a, b = operand(rng, sa, dtype, layout), operand(rng, sb, dtype)
        start = len(checked)
        first = check(a, b)
        again = noo.matmul(a, b)
        assert len(checked) == start + 1, (sa, sb, layout)
        general = noo.matmul(a, b, out=np.empty(first.shape, dtype).view(GeneralOut))
        before = len(checked)
        into = [noo.matmul(a, b, out=np.empty(first.shape, dtype)) for _ in range(2)]
        if sa[-1]:  # (K = 0 fills zeros on the general path, checked on every call)
            assert len(checked) == before + 1, (sa, sb, layout)
        for got in (again, general.view(np.ndarray), *into):
            assert got.dtype == first.dtype and got.shape == first.shape
            assert got.tobytes() == first.tobytes(), (sa, sb, layout)
    checked.clear()
    a = operand(rng, (4, 3), dtype)
    for _ in range(2):
        with pytest.raises(ValueError, match="inner dimensions"):
            noo.matmul(a, operand(rng, (4, 4), dtype))
        with pytest.raises(TypeError, match="same dtype"):
            noo.matmul(a, operand(rng, (3, 4), F32))
    assert len(checked) == 4


def test_int8_is_refused_and_other_byte_orders_converted(rng):
    a = np.ones((3, 3), np.int8)
    with pytest.raises(TypeError, match="MatMul-13: A has dtype int8"):
        noo.matmul(a, a)  # a dtype no version allows: the general path's error
    a, b = operand(rng, (5, 3), I32), operand(rng, (3, 4), I32)
    swapped = noo.matmul(a.astype(">i4"), b.astype(">i4"))  # non-native order: converted
    assert_same_values(swapped, noo.matmul(a, b))


# ------------------------------------------------------------------------------------------
# compilation
# ------------------------------------------------------------------------------------------
def test_one_specialization_per_dtype(rng, monkeypatch):
    """2-D, batched, broadcast and strided calls all reach the same compiled direct kernel
    (a second argument type would be compiled outside the SLP launcher): on the own pool, its
    task twin."""
    monkeypatch.setattr(tuning, "MATMUL_HERE_MAX", 0)  # on the pool, whatever the size
    plans.clear()
    for sa, sb in [((20, 30), (30, 40)), ((3, 20, 30), (3, 30, 40)), ((2, 1, 20, 30), (3, 30, 40))]:
        noo.matmul(operand(rng, sa, I32, "F"), operand(rng, sb, I32))
        noo.matmul(operand(rng, sa, I32), operand(rng, sb, I32, "step"))
    compiled = pool.tasks_of(kernels.matmul_direct) if own.own_pool() else kernels.matmul_direct
    sigs = [s for s in compiled.signatures if str(s[0].dtype) == "int32"]
    assert len(sigs) == 1


def _direct_args(dtype):
    """Arguments of ``matmul_direct`` for an 8x8 by 8x16 product of ones."""
    a = np.ones((8, 8), dtype)
    b = np.ones((8, 16), dtype)
    out = np.empty((1, 8, 16), dtype)
    A = own.operand(a, (), 1)
    B = own.operand(b, (), 1)
    return (*A, *B, 0, out, 8, 16, 8, 1, own.acc_proto(dtype)), out


def test_slp_flag_is_set_for_the_build_and_restored(monkeypatch):
    """The launch of a kernel marked ``slp`` compiles it with numba's SLP flag on and puts it
    back (an uncached twin of the kernel, so the build really happens here); a later launch
    does not rebuild."""
    import numba

    monkeypatch.setenv("NUMBA_NOO_TEST_CHANGED", "1")  # numba re-reads its config at builds
    twin = numba.njit(parallel=True)(kernels.matmul_direct.py_func)
    flags: list[int] = []
    build = twin.compile

    def spy(sig):
        flags.append(numba_config.SLP_VECTORIZE)
        return build(sig)

    monkeypatch.setattr(twin, "compile", spy)
    before = numba_config.SLP_VECTORIZE
    args, out = _direct_args(I32)
    twin.slp = True  # as ``kernel(slp=True)`` marks it
    parallel.launch(twin, *args)
    parallel.launch(twin, *args)
    assert flags == [1]
    assert numba_config.SLP_VECTORIZE == before
    assert len(twin.signatures) == 1
    np.testing.assert_array_equal(out[0], np.full((8, 16), 8, I32))


@pytest.mark.skipif(not own.vector_bits(), reason="no AVX2+FMA")
@pytest.mark.parametrize(
    "dtype, needle",
    [
        # a multiplicand may come from memory (AVX-512 broadcasts A's element in the FMA)
        (F32, r"vfmadd\d+ps\s+[^\n]*%([yz])mm\d+, %\1mm\d+\n"),
        (I32, r"vpaddd\s+%([yz])mm\d+, %\1mm\d+, %\1mm\d+"),
    ],
    ids=["float32", "int32"],
)
def test_direct_kernel_is_vectorized(dtype, needle, monkeypatch):
    """The register block becomes vector code with its 8 accumulators in ymm or zmm registers
    (FMAs / adds into registers, not read-modify-writes of a stack buffer); checked on
    an uncached twin of the kernel.  A NUMBA_* variable changed since import must not undo the
    SLP flag (numba re-reads its configuration when compiling)."""
    monkeypatch.setenv("NUMBA_NOO_TEST_CHANGED", "1")
    import numba

    twin = numba.njit(parallel=True, fastmath={"contract"})(kernels.matmul_direct.py_func)
    a = np.ones((8, 8), dtype)
    abuf, a_off, a_rs, a_cs = own.operand(a, (), 1)
    out = np.empty((1, 8, 16), dtype)
    b = np.ones((8, 16), dtype)
    bbuf, b_off, b_rs, b_cs = own.operand(b, (), 1)
    args = (abuf, a_off, a_rs, a_cs, bbuf, b_off, b_rs, b_cs, 0, out, 8, 16, 8, 1,
            own.acc_proto(dtype))  # fmt: skip
    twin.slp = True  # as ``kernel(slp=True)`` marks it
    parallel.launch(twin, *args)
    asm = twin.inspect_asm(twin.signatures[0])
    assert len(re.findall(needle, asm)) >= 8
    np.testing.assert_array_equal(out[0], np.full((8, 16), 8, dtype))


def test_wide_strips_by_cpu(monkeypatch):
    """AVX-512 strips of four vectors: six rows, but four for all but float64 on AMD's Zen 4
    (one 512-bit FMA per cycle: they measured as fast, with no edge block for M a multiple of
    4)."""
    monkeypatch.setattr(own, "fma512_halved", lambda: True)
    assert [own._wider_block(512, d) for d in (F32, I64, F64)] == [(4, 4), (4, 4), (6, 4)]
    monkeypatch.setattr(own, "fma512_halved", lambda: False)
    assert [own._wider_block(512, d) for d in (F32, I64, F64)] == [(6, 4)] * 3
    assert own._wider_block(256, F32) is None


@pytest.mark.slow
@pytest.mark.skipif(not own.vector_bits(), reason="no AVX2+FMA")
def test_vector_kernel_inner_loop():
    """The micro-kernel's K loop, as compiled for this CPU: one register FMA per accumulator
    and step (vfmadd231ps on zmm or ymm), and no vector register spilled to or reloaded from
    the stack inside the loop."""
    import numba

    from numba_onnx_ops.ops.matmul.microkernel import vector_tile

    tile, nr = own.vector_tile(F32, 64)
    mr = sum(1 for x in tile if type(x) is int)
    reg = "zmm" if own.vector_bits() == 512 else "ymm"

    @numba.njit
    def block(a, b, c, k, tile):
        vector_tile(a, 0, k, 1, b, 0, nr, c, 0, nr, k, mr, tile, False, 0)

    k = 37
    a = np.arange(mr * k, dtype=F32) % 7 - 3
    b = np.arange(k * nr, dtype=F32) % 5 - 2
    c = np.empty(mr * nr, F32)
    block(a, b, c, k, tile)
    want = a.reshape(mr, k).astype(np.float64) @ b.reshape(k, nr).astype(np.float64)
    np.testing.assert_array_equal(c.reshape(mr, nr), want)
    asm = block.inspect_asm(block.signatures[0])
    fma = re.compile(rf"vfmadd231ps\s+.*%{reg}\d+, %{reg}\d+$")
    loops = re.split(r"\n(?=\.LBB)", asm)  # basic blocks
    body = max(loops, key=lambda blk: sum(bool(fma.search(x)) for x in blk.splitlines()))
    fmas = sum(bool(fma.search(x)) for x in body.splitlines())
    print(f"{fmas} register FMAs on {reg} in the K loop of a {mr}x{nr} block")
    assert fmas > 0 and fmas % (mr * nr // (16 if reg == "zmm" else 8)) == 0, fmas
    assert not re.search(rf"%{reg}\d+, -?\d*\(%rsp\)|\(%rsp\), %{reg}\d+", body)


def test_c_view_shares_memory_and_holds_a_reference():
    """The kernels' in-place reshape: the first elements of a C-contiguous array under a new
    shape, the same memory, and a reference to the array for as long as the view lives."""
    import sys

    import numba

    from numba_onnx_ops.runtime.stack import c_view

    @numba.njit
    def views(a, rows, cols):
        v = c_view(a, (rows, cols))
        v[1, 2] = -1.0
        return v, c_view(v, v.size)

    a = np.arange(24.0)
    before = sys.getrefcount(a)
    v, flat = views(a, 3, 4)
    assert v.shape == (3, 4) and v.strides == (32, 8) and flat.shape == (12,)
    assert np.shares_memory(v, a) and np.shares_memory(flat, a)
    want = np.arange(12.0)
    want[6] = -1.0
    np.testing.assert_array_equal(flat, want)
    np.testing.assert_array_equal(v, want.reshape(3, 4))
    assert sys.getrefcount(a) > before
    del v, flat
    assert sys.getrefcount(a) == before


HEAP_ARRAY_SCRIPT = """
import json
import numba
import numpy as np
from numba.core.runtime import rtsys
from numba_onnx_ops.runtime.stack import heap_array

@numba.njit
def scratch(n, proto):
    kept = heap_array(n, proto)
    dropped = heap_array(n, proto)
    for i in range(n):
        dropped[i] = i
        kept[i] = dropped[i] * 2
    return kept

proto = np.float32(0)
scratch(1, proto)  # compiled
before = rtsys.get_allocation_stats()
got = scratch(1000, proto)
right = bool(np.array_equal(got, 2 * np.arange(1000, dtype=np.float32)))
layout = [str(got.dtype), list(got.shape), got.ctypes.data % 16]
del got
after = rtsys.get_allocation_stats()
print(json.dumps({
    "right": right, "layout": layout,
    "allocated": after.alloc - before.alloc, "freed": after.free - before.free,
    "empty": list(scratch(0, np.arange(3, dtype=np.uint16)).shape),
}))
"""


def test_heap_array_is_owned_and_freed():
    """The kernels' ``np.empty``: n elements of the prototype's dtype, aligned, freed with their
    last reference, whether dropped inside compiled code or returned to Python."""
    import json

    from child import run_python

    out = run_python(HEAP_ARRAY_SCRIPT, env={"NUMBA_NRT_STATS": "1"})
    assert json.loads(out.splitlines()[-1]) == {
        "right": True,
        "layout": ["float32", [1000], 0],
        "allocated": 2,
        "freed": 2,
        "empty": [0],
    }
