"""warmup() compiles what later calls use; compiled_specializations() counts what was built."""

from __future__ import annotations

import numpy as np
import pytest
from oracles import I32, U64, assert_matmul_close, assert_pow_matches, random_array

import numba_onnx_ops as noo
from numba_onnx_ops import tuning
from numba_onnx_ops.ops.pow.kernels import CHUNK

# Calls of every kind warmup() promises to prepare, on shapes other than its own: each
# MatMul path of an own-kernel dtype, and Pow with each exponent class and layout.
MATMUL_SHAPES = [((5, 5), (5, 5)), ((9, 6, 8), (9, 8, 8)), ((40, 100), (100, 50)),
                 ((3, 1, 17, 9), (2, 9, 4)), ((30,), (30, 20)), ((20, 30), (30,))]  # fmt: skip
POW_EXPONENTS = [2, 3, -1, 5, np.int32(7), "array", "row"]


def _calls(rng):
    for sa, sb in MATMUL_SHAPES:
        for dtype in (U64, I32):
            a, b = random_array(rng, sa, dtype), random_array(rng, sb, dtype)
            yield noo.matmul, a, b
    x = rng.integers(-9, 9, (6, 30), dtype=I32)
    for e in POW_EXPONENTS:
        y = {"array": x, "row": x[0]}.get(e, e) if isinstance(e, str) else e
        yield noo.pow, x, y


def test_warmup_compiles_what_later_calls_use(rng, capsys):
    seconds = noo.warmup([np.uint64, "int32"], verbose=True)
    assert set(seconds) == {"uint64", "int32"}
    assert all(s >= 0 for s in seconds.values())
    assert "warmup uint64" in capsys.readouterr().err
    compiled = noo.compiled_specializations()
    for name in ("matmul.kernels.matmul_direct", "matmul.kernels.matmul_small",
                 "matmul.kernels.matmul_rows_dot", "matmul.kernels.matmul_cols_axpy",
                 "pow.kernels.pow_general", "pow.kernels.pow_ipow"):  # fmt: skip
        # (the kernel, or on the own pool its task twin)
        found = [compiled.get(f"numba_onnx_ops.ops.{name}{twin}", 0) for twin in ("", "_tasks")]
        assert max(found) >= 1, name
    for op, a, b in _calls(rng):
        result = op(a, b)
        check = assert_matmul_close if op is noo.matmul else assert_pow_matches
        check(result, a, b, what=f"{op.__name__} {a.dtype} {a.shape} {np.shape(b)}")
    assert noo.compiled_specializations() == compiled, "a call after warmup() compiled"


def test_warmup_prepares_special_bases_and_transposed_weights(rng):
    """Negative, zero, subnormal and NaN float bases take fix-up kernels of their own, on the
    calling thread and on the pool; so do products by a transposed B (``x @ W.T``), one row
    or several, and of a transposed A (``A.T @ B``)."""
    noo.warmup(["float32"])
    compiled = noo.compiled_specializations()
    pool = min(max(tuning.POW_HERE_MAX.values()), CHUNK) // 5 + 1  # (5 rows of it: the pool)
    for shape in ((5, 40), (5, pool)):
        x = random_array(rng, shape, np.float32)
        x[:, :4] = [-2.5, 0.0, 1e-40, np.nan]
        for y in (3.7, np.float32(-1.5), x, x[0]):
            assert_pow_matches(noo.pow(x, y), x, y, what=f"float32 {shape} ^ {np.shape(y)}")
    rows = tuning.MATMUL_HERE_MAX // 300 + 1  # (x @ W.T of 300 columns: past it, the pool)
    for sa, sw in (((40,), (30, 40)), ((300,), (rows, 300)), ((9, 50), (70, 50))):
        a, w = random_array(rng, sa, np.float32), random_array(rng, sw, np.float32)
        assert_matmul_close(noo.matmul(a, w.T), a, w.T, what=f"float32 {sa} @ {sw}.T")
    for sa, sb in (((100, 80), (100, 70)), ((700, 500), (700, 9))):  # (A.T: copied rows)
        a, b = random_array(rng, sa, np.float32).T, random_array(rng, sb, np.float32)
        assert_matmul_close(noo.matmul(a, b), a, b, what=f"float32 {sa}.T @ {sb}")
    assert noo.compiled_specializations() == compiled, "a call after warmup() compiled"


def test_warmup_refuses_other_dtypes():
    with pytest.raises(TypeError, match="int8"):
        noo.warmup([np.int8])


def test_compiled_specializations_counts_signatures():
    compiled = noo.compiled_specializations()
    assert all(k.startswith("numba_onnx_ops.") and v >= 1 for k, v in compiled.items())
    x = np.arange(5, dtype=np.float64)
    noo.pow(x, 3.7)  # (on the calling thread's kernel where 5 elements run there)
    here = x.size <= min(tuning.POW_HERE_MAX["general"], CHUNK)
    after = noo.compiled_specializations()
    name = "pow_general_here" if here else "pow_general"
    assert after.get(f"numba_onnx_ops.ops.pow.kernels.{name}", 0) >= 1
    assert all(after.get(k, 0) >= v for k, v in compiled.items())


@pytest.mark.parametrize("one", ["int32", np.int32, np.dtype(np.int32)], ids=str)
def test_warmup_takes_one_dtype_or_several(one):
    assert set(noo.warmup(one)) == {"int32"}
    assert set(noo.warmup([one])) == {"int32"}


@pytest.mark.parametrize("bad", [object(), [np.int32, object()], 3.5])
def test_warmup_says_what_it_expects(bad):
    with pytest.raises(TypeError, match="warmup: dtypes must be a dtype .* or a list of them"):
        noo.warmup(bad)
