"""The float products' accumulation order: each element of C is one chain of fused
multiply-adds over k, in order, from zero (docs/design.md, "The accumulation order").

Every path that keeps the order is checked bit for bit against an exact oracle of that chain
(``oracles.matmul_fma_chain``), for both register widths of the micro-kernel (LLVM splits
wider vectors than the CPU's, so both run on any x86-64 CPU), and the invariances it buys are
checked directly: the same bits on 1 and 2 threads, for a row alone or inside a batch, at any
batch position, in C or Fortran order, on AVX-512 and on AVX2 tiles.  Half types on float32
panels follow the same chain in float32 and round once.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib
import math
import os

import ml_dtypes
import numba
import numpy as np
import pytest
from child import run_python
from oracles import assert_matmul_close, assert_same_values, matmul_fma_chain, round_to_format
from spies import Launches, spy_on_kernels

import numba_onnx_ops as noo

own = importlib.import_module("numba_onnx_ops.ops.matmul.own")
half = importlib.import_module("numba_onnx_ops.ops.matmul.half_panels")
pairs = importlib.import_module("numba_onnx_ops.ops.matmul.bf16_pairs")
tuning = importlib.import_module("numba_onnx_ops.tuning")
plans = importlib.import_module("numba_onnx_ops.core.plans")

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)

pytestmark = pytest.mark.skipif(not own.vector_bits(), reason="no AVX2+FMA: floats on BLAS")


@pytest.fixture
def paths(monkeypatch) -> Launches:
    seen = Launches()
    spy_on_kernels(monkeypatch, lambda name, place: seen.add(name, place))
    return seen


@pytest.fixture(params=[512, 256], ids=["avx512", "avx2"])
def width(request, monkeypatch):
    """The micro-kernel's tiles and whole-matrix code for each register width."""
    caches = (own.vector_tile, own.whole_function)
    monkeypatch.setattr(own, "vector_bits", lambda: request.param)
    for cached in caches:
        cached.cache_clear()
    yield request.param
    for cached in caches:
        cached.cache_clear()


def values(rng, shape, dtype) -> np.ndarray:
    """Random values with full significands, of both signs and a few binades apart, so that
    any other order or an unfused step changes some last bit."""
    x = rng.uniform(0.5, 1, shape) * np.exp2(rng.integers(-3, 4, shape))
    return (x * rng.choice([-1, 1], shape)).astype(dtype)


# (A shape, B shape, the path): every kernel of the order, around its blocks and edges
SHAPES = [
    ((5, 3), (3, 8), "matmul_whole"),  # tiny matrices, straight-line code
    ((3, 7, 5), (3, 5, 16), "matmul_whole"),
    ((17, 40), (40, 70), "matmul_vector"),  # row blocks + 1, a shifted last strip
    ((9, 17), (17, 33), "matmul_vector"),
    ((2, 13, 9), (9, 19), "matmul_vector"),  # broadcast B
    ((1, 37), (37, 50), "matmul_cols_axpy"),  # one row: K not a multiple of the 8-row groups
    ((37,), (37, 9), "matmul_cols_axpy"),
    ((3, 1, 29), (3, 29, 20), "matmul_cols_axpy"),
]


@pytest.mark.parametrize("a_shape, b_shape, path", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_each_path_is_the_fma_chain(paths, width, dtype, a_shape, b_shape, path):
    rng = np.random.default_rng(11)
    a, b = values(rng, a_shape, dtype), values(rng, b_shape, dtype)
    m = a_shape[-2] if len(a_shape) > 1 else 1
    if path == "matmul_whole" and own.whole_function(dtype, m, b_shape[-1], a_shape[-1]) is None:
        path = "matmul_vector"  # (no whole-matrix code for this shape at this width)
    got = noo.matmul(a, b)
    want = matmul_fma_chain(np.atleast_2d(a), b if b.ndim > 1 else b[:, None])
    assert_same_values(got, want.reshape(got.shape))
    assert paths == [path]


def k_whole_and_in_blocks(monkeypatch, rng, shapes, dtype):
    """``(A, B, (M, K, N))`` of random values for each pair of ``shapes``, with K whole, then
    again in blocks of 16 (``tuning.VECTOR_KC``, ``PACKED_KC``)."""
    for kc in (None, 16):
        if kc is not None:
            monkeypatch.setattr(tuning, "VECTOR_KC", {F32: kc, F64: kc})
            monkeypatch.setattr(tuning, "PACKED_KC", {F32: kc, F64: kc})
            plans.clear()  # (the plans made with K whole)
        for a_shape, b_shape in shapes:
            a, b = values(rng, a_shape, dtype), values(rng, b_shape, dtype)
            yield a, b, (a_shape[-2], a_shape[-1], b_shape[-1])


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_row_groups_on_the_pool_are_the_fma_chain(paths, width, monkeypatch, dtype):
    """Products on the pool whose tasks take groups of rows with all of B's strips
    (``own.row_groups``), with K whole and in blocks, 2-D and batched, are the chain."""
    monkeypatch.setattr(tuning, "MATMUL_HERE_MAX", 0)  # on the pool, whatever the size
    rng = np.random.default_rng(16)
    shapes = [((48, 24), (24, 20)), ((2, 48, 17), (17, 20))]
    for a, b, (m, k, n) in k_whole_and_in_blocks(monkeypatch, rng, shapes, dtype):
        kb = own.k_block(dtype, k)
        tile, _ = own.vector_tile(dtype, n)
        nbatch = a.shape[0] if a.ndim == 3 else 1
        groups = own.row_groups(dtype, nbatch, m, n, kb, own._tile_rows(tile), m * n * k)
        assert groups > 1, (a.shape, b.shape, groups)
        assert_same_values(noo.matmul(a, b), matmul_fma_chain(a, b))
    assert set(paths.places) == {"pool"} and set(paths) == {"matmul_vector"}


@pytest.mark.skipif(own._NTHREADS < 2, reason="a pool of one thread groups no rows")
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_four_row_groups_where_six_rows_leave_a_thread_idle(paths, monkeypatch, dtype):
    """On a CPU of six-row blocks, a product of one column strip whose rows six-row blocks
    cannot group takes four-row blocks in groups (``own.grouped_tile``); with strips enough
    for every thread it keeps six rows.  The chain either way."""
    monkeypatch.setattr(own, "vector_bits", lambda: 512)
    monkeypatch.setattr(own, "fma512_halved", lambda: False)
    monkeypatch.setattr(tuning, "MATMUL_HERE_MAX", 0)  # on the pool, whatever the size
    own.vector_tile.cache_clear()
    try:
        rng = np.random.default_rng(20)
        lanes = 64 // dtype.itemsize
        # (M = 16: groups of four rows, none of six; M = 14: neither)
        for m, n, rows in [
            (16, 4 * lanes, 4),
            (16, 4 * lanes * own._NTHREADS, 6),
            (14, 4 * lanes, 6),
        ]:
            a, b = values(rng, (m, 8), dtype), values(rng, (8, n), dtype)
            tile, nr = own.vector_tile(dtype, n)
            assert own._tile_rows(tile) == 6
            got, groups = own.grouped_tile(dtype, 1, m, n, 8, tile, nr, m * n * 8)
            assert own._tile_rows(got) == rows and (groups > 1) == (rows == 4)
            assert got[rows:] == tile[6:]  # (the same vectors of columns)
            assert_same_values(noo.matmul(a, b), matmul_fma_chain(a, b))
    finally:
        own.vector_tile.cache_clear()
    assert set(paths.places) == {"pool"} and set(paths) == {"matmul_vector"}


@pytest.mark.parametrize("panel", ["one strip", "strips"])
@pytest.mark.parametrize("place", ["here", "pool"])
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_packed_strips_of_b_are_the_fma_chain(paths, width, monkeypatch, dtype, place, panel):
    """Products whose tasks copy each strip of B before reading it (``own.packs_strips``),
    one strip at a time or several (a task's group of strips, whose batch entries may differ,
    the last group short), with K whole and in blocks, a shifted last strip, rows in groups
    and in blocks of four or six, 2-D, batched and with B broadcast over a batch, B's rows
    reversed or apart, on the calling thread and on the pool, are the chain."""
    monkeypatch.setattr(tuning, "PACK_MIN_ROWS", 1)
    monkeypatch.setattr(tuning, "PACK_MIN_SPAN", 0)
    monkeypatch.setattr(tuning, "PACK_PANEL", 1 if panel == "one strip" else 1 << 20)
    monkeypatch.setattr(tuning, "MATMUL_HERE_MAX", 0 if place == "pool" else 1 << 40)
    rng = np.random.default_rng(17)
    shapes = [((40, 24), (24, 70)), ((21, 33), (33, 32)), ((3, 18, 17), (17, 40)),
              ((7, 20, 19), (7, 19, 100)), ((5, 3, 12, 9), (9, 130))]  # fmt: skip
    for a, b, (m, k, n) in k_whole_and_in_blocks(monkeypatch, rng, shapes, dtype):
        assert own.packs_strips(dtype, m, k, n)
        want = matmul_fma_chain(a, b)
        assert_same_values(noo.matmul(a, b), want)
        # B's rows in reverse (a negative row stride) and apart (padded rows)
        padded = np.empty(b.shape[:-1] + (n + 3,), dtype)[..., :n]
        padded[...] = b
        for laid in (np.ascontiguousarray(b[..., ::-1, :])[..., ::-1, :], padded):
            assert_same_values(noo.matmul(a, laid), want)
    assert set(paths.places) == {place} and set(paths) == {"matmul_vector"}


@pytest.mark.parametrize("place", ["here", "pool"])
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_long_k_over_a_group_of_strips_is_the_fma_chain(paths, width, monkeypatch, dtype,
                                                        place):  # fmt: skip
    """Copied strips in groups, with K of 512-1024 whole (the copy in several runs of
    ``tuning.PACK_ROWS`` rows) and a task's group crossing batch entries, are the chain."""
    monkeypatch.setattr(tuning, "PACK_MIN_ROWS", 1)
    monkeypatch.setattr(tuning, "PACK_MIN_SPAN", 0)
    monkeypatch.setattr(tuning, "PACK_PANEL", 1 << 20)
    monkeypatch.setattr(tuning, "MATMUL_HERE_MAX", 0 if place == "pool" else 1 << 40)
    a, b, want = _long_k_case(dtype)
    assert_same_values(noo.matmul(a, b), want)
    assert set(paths.places) == {place} and set(paths) == {"matmul_vector"}


@functools.cache
def _long_k_case(dtype):
    """(A, B, the chain) of the long-K test, once a process (float64's oracle is exact)."""
    k, m = (1024, 70) if dtype == F32 else (512, 34)
    rng = np.random.default_rng(23)
    a, b = values(rng, (6, m, k), dtype), values(rng, (k, 20), dtype)
    for x in (a, b):
        x.setflags(write=False)
    return a, b, matmul_fma_chain(a, b)


def test_strips_are_packed_where_b_spans_far():
    """A strip is copied where enough rows pass it and B's rows, over a block of K, lie far
    apart: not for a few rows, nor for a B whose block fits near."""
    far = tuning.PACK_MIN_SPAN // 4 // 64 + 1  # (float32 rows this many elements apart)
    assert own.packs_strips(F32, tuning.PACK_MIN_ROWS, 64, far)
    assert not own.packs_strips(F32, tuning.PACK_MIN_ROWS - 1, 64, far)
    assert not own.packs_strips(F32, tuning.PACK_MIN_ROWS, 64, far // 2)
    assert own.packs_strips(F32, tuning.PACK_MIN_ROWS, 64, -far)  # (rows in reverse)


def test_few_rows_take_four_row_blocks_where_those_compute_less(width, monkeypatch):
    """On AVX2, float32 products of at most ``FEW_ROWS_MAX`` rows with B read in place take
    blocks of four rows by three vectors where those compute fewer elements than six by two:
    not for rows in sixes, nor float64, nor with B's strips copied; AVX-512 keeps its tiles."""

    def columns(dtype, m, n):
        tile, nr = own.vector_tile(dtype, n)
        return own.few_rows_tile(dtype, m, n, 64, n, tile, nr)[1]

    if width == 512:
        assert columns(F32, 4, 1024) == own.vector_tile(F32, 1024)[1]
        return
    for m in (1, 2, 3, 4, 8):
        assert columns(F32, m, 1024) == 24
    for m in (5, 6, tuning.FEW_ROWS_MAX + 1, 16):
        assert columns(F32, m, 1024) == 16
    assert columns(F32, 8, 16) == 16  # (24 columns would compute more than 16)
    assert columns(F64, 8, 1024) == 8
    monkeypatch.setattr(tuning, "PACK_MIN_ROWS", 8)  # (B spans 256 KiB over K = 64)
    assert columns(F32, 8, 1024) == 16


def placed(b: np.ndarray, offset: int) -> np.ndarray:
    """A C-contiguous copy of ``b`` whose first element lies ``offset`` bytes into a page."""
    room = np.empty(b.nbytes + 4096 + b.itemsize, np.uint8)
    start = (offset - room.ctypes.data) % 4096
    copy = room[start : start + b.nbytes].view(b.dtype).reshape(b.shape)
    copy[...] = b
    return copy


@pytest.mark.parametrize("place", ["here", "pool"])
@pytest.mark.parametrize("dtype", [F32, F64, F16, BF16], ids=str)
def test_single_rows_wherever_b_lies_are_the_fma_chain(paths, monkeypatch, dtype, place):
    """A single row of A (``matmul_cols_axpy``, whose sums the kernel places apart from B's
    band in the page) with B starting anywhere in a page, on one band and on several: the
    chain, in float32 and rounded once for the half types."""
    if place == "pool":
        monkeypatch.setattr(tuning, "MATMUL_HERE_MAX", 0)
    rng = np.random.default_rng(19)
    a, b = values(rng, (1, 37), dtype), values(rng, (37, 200), dtype)
    acc = F32 if dtype.itemsize == 2 else dtype
    want = round_to_format(matmul_fma_chain(a, b, acc), dtype)
    for offset in [*range(0, 4096, 256), 64, 4032, 4094, 2]:
        assert_same_values(noo.matmul(a, placed(b, offset - offset % b.itemsize)), want)
    assert set(paths) == {"matmul_cols_axpy"} and set(paths.places) == {place}


def test_single_rows_keep_their_sums_within_their_scratch(tmp_path):
    """The placed sums of ``matmul_cols_axpy`` stay inside the scratch the kernel allocates,
    wherever B lies and whatever the item size: run with numba's bounds checks on (a fresh
    process and numba cache), any index outside an array raises."""
    code = """
        import sys
        import numpy as np, ml_dtypes
        sys.path.insert(0, sys.argv[1])
        from test_matmul_order import placed
        import numba_onnx_ops as noo
        for dtype in (np.float32, np.float64, ml_dtypes.bfloat16):  # (itemsizes 4, 8, 2)
            a = np.ones((1, 9), dtype)
            b = np.ones((9, 300), dtype)
            for offset in range(0, 4096, 64):
                got = noo.matmul(a, placed(b, offset - offset % b.itemsize))
                assert (got.astype(np.float32) == 9).all()
        # a band wider than the stack's scratch takes a heap block
        from numba_onnx_ops.core.dtypes import NATIVE
        from numba_onnx_ops.ops.matmul import kernels
        x, b = np.ones(9, np.float32), np.ones((9, 6000), np.float32)
        out, zero = np.empty((1, 6000), np.float32), np.zeros(1, np.int64)
        kernels.matmul_cols_axpy(x, zero, 1, b.reshape(-1), zero, 6000, 1, NATIVE, out, 6000,
                                 9, 6000, np.empty(0, np.float32))
        assert (out == 9).all()
        print("ok")
    """
    env = {"NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path)}
    assert run_python(code, os.path.dirname(__file__), env=env).split() == ["ok"]


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_blocks_of_k_continue_the_chain(paths, width, monkeypatch, dtype):
    """K in blocks (sums continued from C), a last strip shifted onto the one before it."""
    monkeypatch.setattr(tuning, "VECTOR_KC", {F32: 16, F64: 16})
    rng = np.random.default_rng(12)
    for a_shape, b_shape in [((7, 50), (50, 20)), ((2, 9, 33), (2, 33, 45)), ((3, 40), (40, 8))]:
        a, b = values(rng, a_shape, dtype), values(rng, b_shape, dtype)
        assert_same_values(noo.matmul(a, b), matmul_fma_chain(a, b))
    assert set(paths) == {"matmul_vector"}


@pytest.mark.parametrize("layout", ["F", "T", "step", "neg", "read-only"])
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_any_layout_is_the_same_chain(paths, dtype, layout):
    rng = np.random.default_rng(13)
    a, b = values(rng, (2, 19, 23), dtype), values(rng, (2, 23, 21), dtype)
    want = matmul_fma_chain(a, b)

    def laid(x):
        if layout == "F":
            return np.asfortranarray(x)
        if layout == "T":
            return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)
        if layout == "step":
            big = np.zeros(x.shape[:-2] + (2 * x.shape[-2], 3 * x.shape[-1]), x.dtype)
            big[..., ::2, ::3] = x
            return big[..., ::2, ::3]
        if layout == "read-only":  # (a model's weights)
            x = x.copy()
            x.flags.writeable = False
            return x
        return np.ascontiguousarray(x[..., ::-1, ::-1])[..., ::-1, ::-1]

    for aa, bb in [(laid(a), b), (a, laid(b)), (laid(a), laid(b))]:
        assert_same_values(noo.matmul(aa, bb), want)


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_a_b_read_along_its_columns_is_the_same_chain(paths, width, monkeypatch, dtype):
    """A B whose columns are unit-stride (``x @ W.T``): the micro-kernel's tasks copy its
    strips into rows themselves (``copy_cols``: register transposes of whole vectors, the
    last rows of K one by one), for every tile of both widths, on and around the edges of
    the transposes and of the strips, one row included, on the calling thread and the
    pool.  No copy of B is made first."""

    def no_copy(*args):
        raise AssertionError("B copied to unit-stride rows")

    monkeypatch.setattr(own, "_with_unit_columns", no_copy)
    rng = np.random.default_rng(16)
    lanes = width // (8 * dtype.itemsize)
    for m, k, n in [
        (1, 3, 2 * lanes + 1),
        (1, 70, 9 * lanes),  # (one row: a row alone is the chain of its batch)
        (2, 2, lanes),
        (5, lanes, 3 * lanes - 1),
        (7, lanes + 1, 2 * lanes),
        (13, 2 * lanes + 3, 4 * lanes + 5),
        (64, 130, 96),  # (on the pool)
        (1, 1024, 3 * lanes),  # (B's columns 4 KiB or 8 KiB apart: fewer read at once)
        (1, 200, 300),  # (on the pool)
    ]:
        a, w = values(rng, (m, k), dtype), values(rng, (n, k), dtype)
        want = matmul_fma_chain(a, w.T)
        reversed_columns = np.ascontiguousarray(w[::-1]).T[:, ::-1]
        for bb in (w.T, np.asfortranarray(w.T), reversed_columns):
            assert_same_values(noo.matmul(a, bb), want, what=f"{m}x{k}x{n}")
    batch = values(rng, (3, 11, 40), dtype)
    w = values(rng, (2, 1, 33, 40), dtype)  # (a broadcast batch of transposed B)
    assert_same_values(
        noo.matmul(batch, w.swapaxes(-1, -2)), matmul_fma_chain(batch, w.swapaxes(-1, -2))
    )
    assert set(paths) == {"matmul_vector", "matmul_row_columns"}


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_a_transposed_a_is_the_same_chain(paths, width, dtype):
    """An A of unit row stride (``A.T @ B``, a Fortran-ordered A) in a product of at least
    ``tuning.ROWS_OF_A_MIN`` multiply-adds has its rows copied out first (``rows_of_columns``:
    strips transposed in registers, the last one shifted), on the calling thread or the pool;
    the chains are those of A C-contiguous (the documented order: any layout gives the same
    bits), checked against the oracle for the first shape (exact integers are slow for the
    others in float64)."""
    rng = np.random.default_rng(18)
    lanes = width // (8 * dtype.itemsize)
    for m, k, n, batch in [
        (64, 130, 96, ()),
        (300, 2 * lanes + 3, 200, ()),  # (a last strip shifted onto the one before)
        (40, 70, 60, (5,)),
        (150, 900, 8, ()),  # (its copy on the pool)
    ]:
        assert math.prod(batch) * m * n * k >= tuning.ROWS_OF_A_MIN
        a = values(rng, batch + (k, m), dtype).swapaxes(-1, -2)
        b = values(rng, (k, n), dtype)
        paths.clear()
        got = noo.matmul(a, b)
        assert paths[0] == "rows_of_columns" and "rows_of_columns" not in paths[1:], paths
        want = matmul_fma_chain(a, b) if m == 64 else noo.matmul(np.ascontiguousarray(a), b)
        assert_same_values(got, want, what=f"{m}x{k}x{n}")


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_a_batch_sharing_b_is_one_product_of_its_rows(paths, dtype):
    """A batch whose B is one matrix for every entry (``x @ W``, x of rank 3) and whose A's
    matrices follow each other at one row stride runs as one product of all the rows, in the
    same chains: single rows take the micro-kernel instead of one pass over B each.  Batches
    that are not so (rows apart between matrices, B not shared) keep their entries."""
    rng = np.random.default_rng(17)
    w = values(rng, (40, 33), dtype)
    x = values(rng, (12, 40), dtype)
    rows = x.reshape(12, 1, 40)  # single rows, one after another
    strided = x[:, None, :]  # the same rows, the new axis of stride 0
    want = matmul_fma_chain(x, w)
    for a in (rows, strided, x.reshape(3, 4, 40), x.reshape(2, 3, 2, 40)):
        paths.clear()
        got = noo.matmul(a, w)
        assert_same_values(got.reshape(12, 33), want, what=str(a.shape))
        assert paths == ["matmul_vector"], (a.shape, paths)
    gaps = values(rng, (3, 5, 40), dtype)[:, :4]  # (rows apart between the matrices)
    assert_same_values(noo.matmul(gaps, w), matmul_fma_chain(gaps, w))
    own_b = values(rng, (12, 40, 33), dtype)  # (a B per entry)
    assert_same_values(noo.matmul(rows, own_b), matmul_fma_chain(rows, own_b))
    shared = np.broadcast_to(w, (12, 40, 33))  # (one B, broadcast by the caller)
    paths.clear()
    assert_same_values(noo.matmul(rows, shared), want.reshape(12, 1, 33))
    assert paths == ["matmul_vector"]


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_read_only_operands_on_the_pool_are_the_same_chain(dtype):
    rng = np.random.default_rng(15)
    for a_shape, b_shape in [((64, 130), (130, 96)), ((1, 700), (700, 900))]:
        a, b = values(rng, a_shape, dtype), values(rng, b_shape, dtype)
        assert a.shape[0] * a.shape[1] * b.shape[1] > tuning.MATMUL_HERE_MAX
        want = noo.matmul(a, b)
        a.flags.writeable = b.flags.writeable = False
        assert_same_values(noo.matmul(a, b), want)
        assert_same_values(noo.matmul(a, b.copy()), want)


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_the_same_bits_on_one_and_two_threads_and_in_any_batch_position(dtype, monkeypatch):
    rng = np.random.default_rng(14)
    a, b = values(rng, (300, 200), dtype), values(rng, (200, 150), dtype)
    monkeypatch.setattr(tuning, "MATMUL_HERE_MAX", 0)  # on the pool, whatever the size
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = noo.matmul(a, b)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        plans.clear()
        two = noo.matmul(a, b)
    finally:
        numba.set_num_threads(before)
    assert_same_values(one, two)
    assert_matmul_close(two, a, b)
    # a row alone, a block of rows, the product inside a batch at positions 0 and 3
    assert_same_values(noo.matmul(a[7], b), two[7])
    assert_same_values(noo.matmul(a[7:12], b), two[7:12])
    batch_a = np.stack([values(rng, a.shape, dtype), a, a[::-1], a])
    batch = noo.matmul(batch_a, b)
    assert_same_values(batch[1], two)
    assert_same_values(batch[3], two)
    assert_same_values(noo.matmul(batch_a[1:2], np.stack([b])), two[None])


def test_the_same_bits_on_avx512_and_avx2_tiles(monkeypatch):
    rng = np.random.default_rng(15)
    a, b = values(rng, (3, 45, 60), F32), values(rng, (60, 130), F32)
    results = []
    for bits in (512, 256):
        monkeypatch.setattr(own, "vector_bits", lambda bits=bits: bits)
        own.vector_tile.cache_clear()
        own.whole_function.cache_clear()
        plans.clear()
        results.append(noo.matmul(a, b))
    own.vector_tile.cache_clear()
    own.whole_function.cache_clear()
    assert_same_values(results[0], results[1])


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_specials_and_empty_sums(dtype):
    rng = np.random.default_rng(16)
    a, b = values(rng, (9, 20), dtype), values(rng, (20, 33), dtype)
    a[1, 3], a[2, 5], b[7, 4] = np.inf, np.nan, -np.inf
    got = noo.matmul(a, b)
    with np.errstate(invalid="ignore"):
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf].astype(dtype))
    assert_same_values(noo.matmul(a[:, :0], b[:0]), np.zeros((9, 33), dtype))  # k = 0


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_half_panels_follow_the_chain_in_float32(monkeypatch, dtype):
    """float32 panels, K over several panels (sums continued across them), a ragged last
    column tile: the float32 chain, rounded once to the half type."""
    monkeypatch.setattr(tuning, "HALF_PANELS_MIN", 1000)
    monkeypatch.setattr(pairs, "pairs_win", lambda m, n, k: False)
    monkeypatch.setattr(half, "PANEL", 600)
    monkeypatch.setattr(half, "PANEL_MIN", 16)
    monkeypatch.setattr(half, "PANEL_KMAX", 24)
    rng = np.random.default_rng(17)
    a, b = values(rng, (12, 60), dtype), values(rng, (60, 29), dtype)
    want = round_to_format(matmul_fma_chain(a, b, F32), dtype)
    assert_same_values(noo.matmul(a, b), want)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
@pytest.mark.parametrize("threads", [1, 2])
def test_half_panels_on_one_and_two_threads_follow_the_chain_in_float32(
    monkeypatch, dtype, threads
):
    """One panel of each operand, with an edge block of rows and a last strip shifted: the
    float32 chain, rounded once, on any thread count."""
    monkeypatch.setattr(tuning, "HALF_PANELS_MIN", 1000)
    monkeypatch.setattr(pairs, "pairs_win", lambda m, n, k: False)
    rng = np.random.default_rng(19)
    a, b = values(rng, (13, 20), dtype), values(rng, (20, 37), dtype)
    want = round_to_format(matmul_fma_chain(a, b, F32), dtype)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        got = noo.matmul(a, b)
    finally:
        numba.set_num_threads(before)
    assert_same_values(got, want)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
@pytest.mark.parametrize("threads", [1, 2])
def test_widened_halves_follow_the_chain_in_float32(monkeypatch, dtype, threads):
    """A mid-size half product widened whole (past the direct kernel, short of the panels):
    the float32 chain, rounded once, on any thread count and for any layout of A."""
    if not own.vector_bits():
        pytest.skip("no vector micro-kernel: the packed kernel takes these")
    monkeypatch.setattr(pairs, "pairs_win", lambda m, n, k: False)
    rng = np.random.default_rng(23)
    a, b = values(rng, (33, 90), dtype), values(rng, (90, 91), dtype)
    assert half.widened_takes(a, b, (), 33, 91, 90)
    want = round_to_format(matmul_fma_chain(a, b, F32), dtype)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for x in (a, np.asfortranarray(a), a[::-1].copy()[::-1]):
            assert_same_values(noo.matmul(x, b), want)
    finally:
        numba.set_num_threads(before)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
@pytest.mark.parametrize("threads", [1, 2])
def test_widened_half_batches_follow_the_chain_in_float32(monkeypatch, dtype, threads):
    """Mid-size half products in a batch, widened whole: the float32 chain, rounded once, the
    bits of each matrix alone, on any thread count, for a broadcast batch and operands of any
    layout (copied C-contiguous first)."""
    if not own.vector_bits():
        pytest.skip("no vector micro-kernel: the packed kernel takes these")
    monkeypatch.setattr(pairs, "pairs_win", lambda m, n, k: False)
    rng = np.random.default_rng(31)
    a, b = values(rng, (2, 1, 40, 90), dtype), values(rng, (3, 90, 91), dtype)
    assert half.widened_takes(a, b, (2, 3), 40, 91, 90)
    want = round_to_format(matmul_fma_chain(a, b, F32), dtype)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for x, y in [
            (a, b),
            (np.asfortranarray(a), b),
            (a, np.ascontiguousarray(b.transpose(0, 2, 1)).transpose(0, 2, 1)),
        ]:
            assert_same_values(noo.matmul(x, y), want)
        alone = noo.matmul(a[1, 0], b[2])
    finally:
        numba.set_num_threads(before)
    assert_same_values(alone, want[1, 2])


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_widened_half_batches_in_groups_follow_the_chain(monkeypatch, dtype):
    """A batch whose float32 copies would pass ``BATCH_MAX`` goes in groups of entries that
    fit the scratch a thread keeps, the last one shorter: the same chain for a broadcast batch,
    a B shared by the batch and an operand of another layout."""
    if not own.vector_bits():
        pytest.skip("no vector micro-kernel: the packed kernel takes these")
    monkeypatch.setattr(pairs, "pairs_win", lambda m, n, k: False)
    m, k, n = 40, 90, 91
    monkeypatch.setattr(half, "BATCH_MAX", 4 * (m * k + k * n + m * n))  # (past four entries:)
    monkeypatch.setattr(half, "SCRATCH_KEEP", 3 * (m * k + k * n + m * n))  # (groups of three)
    grouped = []
    in_groups = half._in_groups
    monkeypatch.setattr(half, "_in_groups", lambda *args: grouped.append(1) or in_groups(*args))
    plans.clear()
    rng = np.random.default_rng(37)
    a, b = values(rng, (2, 1, m, k), dtype), values(rng, (5, k, n), dtype)
    flat, shared = values(rng, (10, m, k), dtype), values(rng, (k, n), dtype)
    batched = values(rng, (10, k, n), dtype)
    for x, y in [(a, b), (flat, shared), (np.asfortranarray(flat), batched)]:
        want = round_to_format(matmul_fma_chain(x, y, F32), dtype)
        assert_same_values(noo.matmul(x, y), want)
    assert len(grouped) == 3


def test_widened_halves_from_several_threads_in_any_order_of_sizes(monkeypatch):
    """Each thread widens into a scratch buffer of its own, kept from call to call and grown
    as needed: products of several sizes, in turns and from four threads at once, each the
    float32 chain rounded once."""
    if not own.vector_bits():
        pytest.skip("no vector micro-kernel: the packed kernel takes these")
    monkeypatch.setattr(pairs, "pairs_win", lambda m, n, k: False)
    rng = np.random.default_rng(29)
    cases = []
    for m, k, n in [(33, 90, 91), (64, 130, 72), (9, 300, 100), (33, 90, 91)]:
        a, b = values(rng, (m, k), F16), values(rng, (k, n), F16)
        assert half.widened_takes(a, b, (), m, n, k)
        cases.append((a, b, round_to_format(matmul_fma_chain(a, b, F32), F16)))

    def calls(turn):
        for a, b, want in cases[turn % 4 :] + cases[: turn % 4]:
            assert_same_values(noo.matmul(a, b), want)
        return True

    assert calls(0)
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert all(ex.map(calls, range(8), timeout=300))


def test_bfloat16_batches_follow_the_chain_in_float32(paths, monkeypatch):
    """A batch of smaller bfloat16 products widened whole: the float32 chain of each element,
    rounded once; broadcast batches, a last strip shifted onto the one before."""
    monkeypatch.setattr(tuning, "HALF_BATCH_MIN", 1000)
    monkeypatch.setattr(pairs, "pairs_win", lambda m, n, k: False)
    rng = np.random.default_rng(18)
    a, b = values(rng, (2, 1, 7, 30), BF16), values(rng, (3, 30, 21), BF16)
    want = round_to_format(matmul_fma_chain(a, b, F32), BF16)
    assert_same_values(noo.matmul(a, b), want)
    assert paths[0] == "widen_panels" and paths[-1] == "narrow_panel"
    assert set(paths[1:-1]) <= {"matmul_vector", "matmul_whole"}
