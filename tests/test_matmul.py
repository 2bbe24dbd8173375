"""MatMul against semantics.md: versions, dtypes, shapes and layouts, checked against oracles.

Integers are compared exactly with Python-integer products reduced modulo 2**bits; floats
against a wider-precision product with the forward error bound of any summation order.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import itertools
import subprocess
import sys
import warnings

import numpy as np
import pytest
from oracles import (
    BF16,
    F16,
    F32,
    F64,
    HALFS,
    I32,
    I64,
    LAYOUTS,
    MATMUL_SINCE,
    SPEC_MATMUL_TYPES,
    U32,
    U64,
    as_layout,
    assert_matmul_close,
    assert_same_values,
    available_memory_bytes,
    call_checked,
    dtype_id,
    random_array,
    resolved_version,
    round_to_format,
    wrap_int,
)

import numba_onnx_ops as noo

#: MatMul-13's T, in a fixed order
DTYPES = [F16, BF16, F32, F64, I32, I64, U32, U64]


def matmul_checked(a, b, **kwargs):
    """noo.matmul with its inputs checked untouched and its result fresh."""
    return call_checked(noo.matmul, a, b, **kwargs)


# ------------------------------------------------------------------------------------------
# versions and type tables
# ------------------------------------------------------------------------------------------
def test_type_table_matches_spec():
    assert set(noo.MATMUL_TYPES) == set(MATMUL_SINCE)
    for version, allowed in SPEC_MATMUL_TYPES.items():
        assert {np.dtype(d) for d in noo.MATMUL_TYPES[version]} == set(allowed), version


def test_ml_dtypes_is_imported_only_by_whoever_makes_bfloat16():
    # ml_dtypes takes up to a second to import; a bfloat16 array exists only after it is.
    code = (
        "import sys, numpy as np, numba_onnx_ops as nox\n"
        "i = np.ones((2, 2), np.int32)\n"
        "nox.pow(np.float32([2]), 2.0), nox.matmul(i, i), nox.pow(i, 2), nox.matmul(i / 2, i / 2)\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "import ml_dtypes\n"
        "x = np.array([1.5, 2.0], ml_dtypes.bfloat16)\n"
        "assert nox.pow(x, 2.0).tolist() == [2.25, 4.0] and nox.matmul(x, x) == 6.25\n"
        "try:\n"
        "    nox.matmul(x, x, opset=9)\n"
        "except TypeError as e:\n"
        "    assert 'bfloat16' in str(e)\n"
        "else:\n"
        "    raise AssertionError('MatMul-9 took bfloat16')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


@pytest.mark.parametrize("opset", [*range(1, 26), None])
def test_resolve_version(opset):
    expected = 13 if opset is None else resolved_version(MATMUL_SINCE, opset)
    assert noo.resolve_version("MatMul", opset) == expected


def test_resolve_version_accepts_numpy_integers():
    assert noo.resolve_version("MatMul", np.int64(11)) == 9


@pytest.mark.parametrize(
    ("opset", "dtype"),
    [
        (opset, dtype)
        for opset in (1, 8, 9, 12, 13, 21, None)
        for dtype in DTYPES
        if dtype in SPEC_MATMUL_TYPES[resolved_version(MATMUL_SINCE, opset or 99)]
    ],
    ids=str,
)
def test_every_allowed_dtype_at_every_version(opset, dtype, rng):
    a = random_array(rng, (2, 5, 33), dtype)
    b = random_array(rng, (33, 9), dtype)
    assert_matmul_close(matmul_checked(a, b, opset=opset), a, b, what=f"opset {opset}")


@pytest.mark.parametrize("opset", [1, 8, 9, 12, 13, 21, None])
def test_opset_selects_version(opset, rng):
    """The dtypes each version first allows tell the version that ran."""
    version = 13 if opset is None else resolved_version(MATMUL_SINCE, opset)
    for dtype, since in [(F32, 1), (F16, 1), (I32, 9), (U64, 9), (BF16, 13)]:
        a = random_array(rng, (2, 3, 4), dtype)
        b = random_array(rng, (4, 5), dtype)
        if version >= since:
            assert_matmul_close(matmul_checked(a, b, opset=opset), a, b)
        else:
            with pytest.raises(TypeError, match=f"MatMul-{version}"):
                noo.matmul(a, b, opset=opset)


# ------------------------------------------------------------------------------------------
# shapes: numpy.matmul's rules, block-boundary sizes, zero sizes, ranks up to 6
# ------------------------------------------------------------------------------------------
SHAPES = {
    "1x1": ((1, 1), (1, 1)),
    "7x63x65": ((7, 63), (63, 65)),
    "65x129x7": ((65, 129), (129, 7)),
    "129x65x129": ((129, 65), (65, 129)),
    "257x7x63": ((257, 7), (7, 63)),
    "3x257x5": ((3, 257), (257, 5)),
    "1d@1d": ((257,), (257,)),
    "1d@2d": ((65,), (65, 129)),
    "3d@1d": ((7, 65, 129), (129,)),
    "1d@4d": ((5,), (2, 3, 5, 4)),
    "2d@4d": ((4, 5), (3, 2, 5, 6)),
    "bcast_batch": ((3, 1, 7, 65), (1, 2, 65, 63)),
    "rank6": ((2, 1, 2, 1, 3, 5), (1, 2, 1, 2, 5, 4)),
    "M=0": ((0, 5), (5, 3)),
    "N=0": ((4, 5), (5, 0)),
    "batch=0": ((0, 4, 5), (5, 3)),
    "bcast_batch=0": ((2, 0, 4, 5), (1, 5, 3)),
    "K=0": ((4, 0), (0, 3)),
    "K=0_1d@1d": ((0,), (0,)),
    "K=0_2d@1d": ((2, 0), (0,)),
    "K=0_bcast": ((2, 1, 4, 0), (3, 0, 6)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shapes", list(SHAPES.values()), ids=list(SHAPES))
def test_shape_grid(shapes, dtype, rng):
    a = random_array(rng, shapes[0], dtype, scale=0.5)
    b = random_array(rng, shapes[1], dtype, scale=0.5)
    result = matmul_checked(a, b)
    assert result.shape == np.matmul(np.zeros(a.shape), np.zeros(b.shape)).shape
    assert_matmul_close(result, a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shapes", [s for n, s in SHAPES.items() if n.startswith("K=0")])
def test_inner_dimension_zero_gives_zeros(shapes, dtype):
    a = np.ones(shapes[0], dtype)
    b = np.ones(shapes[1], dtype)
    result = matmul_checked(a, b)
    expected_shape = np.matmul(np.zeros(a.shape), np.zeros(b.shape)).shape
    assert result.shape == expected_shape and result.dtype == dtype
    assert (result.astype(np.float64) == 0).all()


def test_one_dimensional_operands_return_zero_dim_array():
    a = np.arange(5, dtype=np.float64)
    result = matmul_checked(a, a)
    assert result.shape == () and result.dtype == F64
    assert result[()] == 30.0


def test_array_likes_go_through_asarray():
    assert_same_values(matmul_checked([[1.0, 2.0]], [[3.0], [4.0]]), np.array([[11.0]]))
    assert_same_values(matmul_checked([1, 2, 3], [[1], [1], [1]]), np.array([6]))


# ------------------------------------------------------------------------------------------
# layouts
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F32, I64], ids=dtype_id)
@pytest.mark.parametrize(("layout_a", "layout_b"), list(itertools.product(LAYOUTS, LAYOUTS)))
def test_layout_grid(layout_a, layout_b, dtype, rng):
    a = as_layout(random_array(rng, (3, 7, 9), dtype), layout_a)
    b = as_layout(random_array(rng, (9, 5), dtype), layout_b)
    assert_matmul_close(matmul_checked(a, b), a, b, what=f"{layout_a} @ {layout_b}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_every_dtype(layout, dtype, rng):
    a = as_layout(random_array(rng, (2, 65, 63), dtype), layout)
    b = as_layout(random_array(rng, (2, 63, 7), dtype), layout)
    assert_matmul_close(matmul_checked(a, b), a, b, what=layout)


@pytest.mark.parametrize("dtype", [F32, U32], ids=dtype_id)
def test_transposed_and_batch_broadcast_views(dtype, rng):
    base = random_array(rng, (5, 6, 4), dtype)
    a = base.transpose(0, 2, 1)  # (5, 4, 6), neither C nor F contiguous
    b = np.broadcast_to(random_array(rng, (6, 3), dtype), (5, 6, 3))  # zero batch stride
    assert_matmul_close(matmul_checked(a, b), a, b)
    a1 = random_array(rng, (11,), dtype)[::-2]  # 1-D, negative stride
    b1 = random_array(rng, (3, 8, 6), dtype)[:, :, ::-1].swapaxes(1, 2)  # (3, 6, 8)
    assert_matmul_close(matmul_checked(a1, b1), a1, b1)


# ------------------------------------------------------------------------------------------
# integer wraparound (exact modulo 2**bits)
# ------------------------------------------------------------------------------------------
WRAP_CASES = [
    # dtype, A, B: the exact integer product overflows the dtype
    (I32, [[2**31 - 1, 1]], [[1], [1]]),
    (I32, [[2**16]], [[2**16]]),
    (I32, [[-(2**31), -1]], [[-1], [1]]),
    (I64, [[2**62]], [[4]]),
    (I64, [[2**63 - 1, 2**63 - 1]], [[2], [3]]),
    (I64, [[-(2**63)]], [[-1]]),
    (U32, [[2**32 - 1]], [[2**32 - 1]]),
    (U32, [[2**31, 2**31]], [[1], [1]]),
    (U64, [[2**64 - 1, 2]], [[2**64 - 1], [2**63]]),
    (U64, [[2**32 + 1]], [[2**32 - 1]]),
]


@pytest.mark.parametrize(("dtype", "a", "b"), WRAP_CASES, ids=lambda v: str(v)[:40])
def test_integer_wraparound(dtype, a, b):
    a = np.array(a, dtype=dtype)
    b = np.array(b, dtype=dtype)
    exact = np.array(a.astype(object) @ b.astype(object))  # Python integers, no overflow
    assert_same_values(matmul_checked(a, b), wrap_int(exact, dtype))


@pytest.mark.parametrize("dtype", [I32, I64, U32, U64], ids=dtype_id)
def test_integer_full_range_products(dtype, rng):
    # every product and partial sum overflows; the result is still exact modulo 2**bits
    a = random_array(rng, (17, 129), dtype)
    b = random_array(rng, (129, 33), dtype)
    assert_matmul_close(matmul_checked(a, b), a, b)


# ------------------------------------------------------------------------------------------
# float accumulation
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64], ids=dtype_id)
def test_exact_sums_are_rounded_once(dtype, rng):
    # Small integer values: every product and partial sum is exact in float32 (|sum| <= 16448),
    # so float32 accumulation followed by one rounding gives round(exact sum). Accumulating in
    # the half type itself would round partial sums above 2048 (float16) or 256 (bfloat16).
    a = rng.integers(-8, 9, size=(33, 257)).astype(dtype)
    b = rng.integers(-8, 9, size=(257, 17)).astype(dtype)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    expected = round_to_format(exact.astype(np.float64), dtype)
    assert_same_values(matmul_checked(a, b), expected, signed_zeros=False)


@pytest.mark.parametrize("dtype", HALFS, ids=dtype_id)
def test_half_products_accumulate_beyond_half_range(dtype):
    # products and partial sums beyond float16's range (65504) stay finite in float32
    a = np.array([[300, 300], [200, 200]], dtype=dtype)
    b = np.array([[300, 200], [-300, -100]], dtype=dtype)
    # exact: [[0, 30000], [0, 20000]]
    expected = round_to_format(np.array([[0.0, 30000.0], [0.0, 20000.0]]), dtype)
    assert_same_values(matmul_checked(a, b), expected, signed_zeros=False)
    a3 = np.array([[200, 200, -200]], dtype=dtype)
    b3 = np.array([[200], [200], [200]], dtype=dtype)
    assert_same_values(matmul_checked(a3, b3), round_to_format(np.array([[40000.0]]), dtype))


@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64], ids=dtype_id)
def test_nan_and_inf_propagate(dtype, rng):
    a = random_array(rng, (4, 6), dtype)
    b = random_array(rng, (6, 5), dtype)
    a[0, 2] = np.nan
    a[1, 1] = np.inf  # row 1 meets b[1, :]
    b[3, 4] = np.inf
    a[2, 3] = 0  # inf * 0 = nan at [2, 4]
    a[3, 3] = -1  # -inf at [3, 4] unless another inf cancels
    assert_matmul_close(matmul_checked(a, b), a, b)


def _overflow_and_invalid(dtype):
    """``(a, b, a @ b)``: a product that overflows (row 0) and meets inf * 0 and inf - inf
    (rows 1 and 2), with its IEEE result."""
    big, inf, nan = np.finfo(dtype).max, np.inf, np.nan
    a = np.array([[big, big], [inf, 1], [inf, -inf]], dtype)
    b = np.array([[1, 0, 2], [1, 1, 1]], dtype)
    expected = np.array([[inf, big, inf], [inf, nan, inf], [nan, nan, nan]], dtype)
    return a, b, expected


@pytest.mark.parametrize("path", ["blas", "own"])
@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_overflow_and_invalid_give_ieee_results_without_warnings(
    dtype, path, launches, monkeypatch
):
    # Whichever path runs the product, as onnxruntime: no warning, no FloatingPointError.
    a, b, expected = _overflow_and_invalid(dtype)
    if path == "blas":  # as on a CPU without the vector micro-kernel, where BLAS takes it
        own = importlib.import_module("numba_onnx_ops.ops.matmul.own")
        monkeypatch.setattr(own, "takes_floats", lambda dtype: False)
        importlib.import_module("numba_onnx_ops.core.plans").clear()
    else:
        b = np.repeat(b, 2, axis=1)[:, ::2]  # no axis of unit stride: not a layout BLAS takes
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = [noo.matmul(a, b), noo.matmul(a, b)]  # the plan made, then the plan kept
        results.append(noo.matmul(a, b, out=np.empty((3, 3), dtype)))  # a plan with out=
        with np.errstate(all="raise"):
            results += [noo.matmul(a, b), noo.matmul(a, b, out=np.empty((3, 3), dtype))]
    for result in results:
        assert_same_values(result, expected)
    if path == "blas":
        assert launches == ["blas"] * len(results)
    else:
        assert launches and "blas" not in launches


def test_blas_products_of_many_threads_at_once_stay_silent(rng):
    # numpy lets go of the GIL inside BLAS: products of other threads run meanwhile.
    a = random_array(rng, (96, 96), F32)
    b = random_array(rng, (96, 96), F32)
    a[0, 0], b[0, 0] = np.inf, 0  # inf * 0 at [0, 0]; the rest of row 0: infinities

    def products():
        return [noo.matmul(a, b) for _ in range(50)]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            runs = [pool.submit(products) for _ in range(4)]
            results = [r for run in runs for r in run.result()]
    assert len(results) == 200
    for result in results:
        assert_matmul_close(result, a, b)


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_long_inner_dimension(dtype, rng):
    a = random_array(rng, (3, 4099), dtype)
    b = random_array(rng, (4099, 2), dtype)
    assert_matmul_close(matmul_checked(a, b), a, b)


# ------------------------------------------------------------------------------------------
# out=
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F32, BF16, I64], ids=dtype_id)
def test_out_is_filled_and_returned(dtype, rng):
    a = random_array(rng, (2, 7, 5), dtype)
    b = random_array(rng, (5, 3), dtype)
    out = np.full((2, 7, 3), 99, dtype=dtype)
    result = matmul_checked(a, b, out=out)
    assert result is out
    assert_matmul_close(out, a, b)


@pytest.mark.parametrize("operands", ["arrays", "lists"])  # (lists: the general path)
@pytest.mark.parametrize("order", ["F", "strided"])
def test_out_any_layout(order, operands, rng):
    a = random_array(rng, (7, 5), F64)
    b = random_array(rng, (5, 3), F64)
    if operands == "lists":
        a, b = a.tolist(), b.tolist()
    if order == "F":
        out = np.full((7, 3), np.nan, order="F")
        base = out
    else:
        base = np.full((14, 6), np.nan)
        out = base[::2, ::2]
    result = matmul_checked(a, b, out=out)
    assert result is out
    assert_matmul_close(out, a, b)
    if order == "strided":
        untouched = np.ones(base.shape, bool)
        untouched[::2, ::2] = False
        assert np.isnan(base[untouched]).all()


@pytest.mark.parametrize(
    ("dtype", "shape"),
    [(I32, (2, 24, 24)), (F16, (2, 24, 24)), (F32, (1024, 8, 8)), (F32, (2, 24, 24))],
    ids=["int32-direct", "float16-direct", "float32-small", "float32-blas"],
)
@pytest.mark.parametrize("overlap", ["A", "B", "shifted", "through a memoryview"])
def test_out_overlapping_an_input(dtype, shape, overlap, rng):
    # out shares memory with an operand the kernel still reads: the result is the product of
    # the operands as they were before the call
    size = int(np.prod(shape))
    buf = np.zeros(size + shape[-1], dtype)  # "shifted": out starts one row into A
    a = buf[:size].reshape(shape)
    if overlap == "through a memoryview":  # "shifted", A an array over another object
        a = np.frombuffer(memoryview(buf), dtype)[:size].reshape(shape)
    a[...] = random_array(rng, shape, dtype)
    b = random_array(rng, shape, dtype)
    a0, b0 = a.copy(), b.copy()
    out = {"A": a, "B": b}.get(overlap, buf[shape[-1] :].reshape(shape))
    result = noo.matmul(a, b, out=out)
    assert result is out
    assert_matmul_close(out, a0, b0, what=f"out overlapping {overlap}")


def test_out_zero_dim():
    a = np.arange(4, dtype=np.int32)
    out = np.array(-1, dtype=np.int32)
    assert matmul_checked(a, a, out=out) is out
    assert out[()] == 14


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((1, 1), (1, 1)), ((4, 1), (1,)), ((1,), (1, 1))])
def test_result_is_fresh_for_trivial_shapes(shapes, rng):
    # even where the product could be a view of an input, it is a fresh C-contiguous array
    a = random_array(rng, shapes[0], F32)
    b = np.ones(shapes[1], F32)
    assert_matmul_close(matmul_checked(a, b), a, b)


def test_versions_agree_on_shared_dtypes(rng):
    a = random_array(rng, (4, 9), F32)
    b = random_array(rng, (9, 2), F32)
    results = [matmul_checked(a, b, opset=v) for v in (1, 9, 13)]
    for r in results:
        assert_matmul_close(r, a, b)


@pytest.mark.slow
def test_more_than_2_31_output_elements():
    # 64-bit indexing: a (46341, 46341) float16 result has 2**31 + 4633 elements (4.3 GB)
    n = 46341
    if available_memory_bytes() < 8 * 2**30:
        pytest.skip("needs about 5 GB of free memory")
    a = ((np.arange(n) % 7) - 3).astype(F16).reshape(n, 1)
    b = ((np.arange(n) % 5) - 2).astype(F16).reshape(1, n)
    result = noo.matmul(a, b)
    assert result.shape == (n, n) and result.dtype == F16
    rows = np.r_[0:3, n // 2 : n // 2 + 3, n - 3 : n]  # small integer products: exact
    expected = np.outer(a[rows, 0].astype(np.float64), b[0].astype(np.float64)).astype(F16)
    assert_same_values(result[rows], expected, signed_zeros=False)
    last = result.reshape(-1)[-(2**20) :]  # the elements past 2**31
    expected_tail = np.outer(a[-23:, 0].astype(np.float64), b[0].astype(np.float64))
    expected_tail = expected_tail.astype(F16).reshape(-1)[-(2**20) :]
    assert_same_values(last, expected_tail, signed_zeros=False)
