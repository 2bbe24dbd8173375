"""MatMul and Pow on dask arrays: the in-memory semantics, lazily, on any chunking.

Pow results and integer products must be bit-identical to the in-memory call on the whole
arrays; float products must lie within the forward error bound of ``semantics.md`` (they may
sum a chunked contraction axis in another order).  Every check is decided at the call, with
the in-memory call's exception and message, without computing a block.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
from oracles import (
    BF16,
    F16,
    F32,
    F64,
    assert_matmul_close,
    assert_same_values,
    dtype_id,
    is_int,
    max_finite,
    random_array,
)

import numba_onnx_ops as nox

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")


def lazy(a: np.ndarray, chunks, calls: list | None = None):
    """``a`` as a dask array of ``chunks`` whose blocks append to ``calls`` when computed."""
    d = da.from_array(a, chunks=chunks)
    if calls is None:
        return d

    def note(block):
        calls.append(block.shape)
        return block

    return d.map_blocks(note, meta=np.empty((0,) * a.ndim, a.dtype))  # no call to infer meta


def compute_sync(x):
    return x.compute(scheduler="synchronous")


def pow_base(rng, shape, dtype):
    """Bases with zeros, negatives, NaN and infinities among ordinary values."""
    x = random_array(rng, shape, dtype, scale=2.0)
    if not is_int(x.dtype):
        flat = x.reshape(-1)
        flat[: min(4, flat.size)] = np.array([0.0, -0.0, np.inf, np.nan])[: min(4, flat.size)]
    return x


# --------------------------------------------------------------------------------------------
# Pow
# --------------------------------------------------------------------------------------------
CHUNKINGS_2D = {
    "one": (-1, -1),
    "rows": (7, -1),
    "cols": (-1, 9),
    "both-ragged": (5, 11),
    "single-rows": (1, 13),
}


@pytest.mark.parametrize("chunking", CHUNKINGS_2D)
@pytest.mark.parametrize(
    "xdtype,exponent",
    [
        (F32, 3.7),
        (F32, 2),
        (F64, -1.5),
        (F16, 3.7),
        (BF16, np.float32(0.75)),
        (np.dtype(np.int32), 3),
        (np.dtype(np.int64), np.float64(1.5)),
    ],
    ids=lambda v: dtype_id(v) if isinstance(v, np.dtype) else repr(v),
)
def test_pow_scalar_exponent_any_chunking(chunking, xdtype, exponent, rng):
    x = pow_base(rng, (23, 31), xdtype)
    r = nox.pow(lazy(x, CHUNKINGS_2D[chunking]), exponent)
    assert isinstance(r, da.Array)
    assert r.dtype == x.dtype and r.shape == x.shape
    assert_same_values(compute_sync(r), nox.pow(x, exponent), what=chunking)


@pytest.mark.parametrize(
    "xshape,xchunks,yshape,ychunks",
    [
        ((23, 31), (7, 9), (23, 31), (5, 11)),  # same shape, chunks unified
        ((23, 31), (7, 9), (31,), None),  # numpy row, passed whole
        ((23, 31), (7, 9), (31,), (8,)),  # dask row
        ((23, 31), (7, 9), (23, 1), (6, 1)),  # dask column: size-1 broadcast
        ((23, 31), (7, 9), (2, 23, 31), (1, 10, 10)),  # Y adds a dimension
        ((4, 1, 31), (2, 1, 10), (1, 23, 1), None),  # both broadcast
        ((23, 31), None, (23, 31), (4, 31)),  # numpy X, dask Y
        ((23, 31), (7, 9), (1, 1, 1), None),  # one-element numpy Y adds dimensions
        ((23, 31), (7, 9), (1,), (1,)),  # one-element dask Y
    ],
)
@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=dtype_id)
def test_pow_broadcasting_and_mixes(xshape, xchunks, yshape, ychunks, dtype, rng):
    x = pow_base(rng, xshape, dtype)
    y = random_array(rng, yshape, dtype, scale=2.0)
    X = x if xchunks is None else lazy(x, xchunks)
    Y = y if ychunks is None else lazy(y, ychunks)
    r = nox.pow(X, Y)
    assert isinstance(r, da.Array)
    assert_same_values(compute_sync(r), nox.pow(x, y), what=f"{xshape} {yshape}")


@pytest.mark.parametrize(
    "xdtype,ydtype",
    [(np.int32, np.int8), (np.int64, np.uint32), (np.float32, np.int64), (BF16, BF16)],
    ids=str,
)
def test_pow_type_pairs(xdtype, ydtype, rng):
    x = random_array(rng, (17, 12), xdtype)
    y = random_array(rng, (17, 12), ydtype)
    if is_int(np.dtype(ydtype)):
        y = (y % 7).astype(ydtype)
    r = nox.pow(lazy(x, (5, 5)), lazy(y, (4, 12)))
    assert_same_values(compute_sync(r), nox.pow(x, y))


@pytest.mark.parametrize("opset", [1, 7, 12, 13, 15])
def test_pow_weak_python_scalars(opset, rng):
    x = random_array(rng, (9, 8), F16)
    expected = nox.pow(x, 2.5, opset=opset)
    assert_same_values(compute_sync(nox.pow(lazy(x, (4, 3)), 2.5, opset=opset)), expected)
    scalar_base = lazy(x, (4, 3))
    if opset == 1:  # Pow-1: a scalar base is not broadcast against a tensor exponent
        assert _message(lambda: nox.pow(1.5, scalar_base, opset=1)) == _message(
            lambda: nox.pow(1.5, x, opset=1)
        )
    else:
        expected = nox.pow(1.5, x, opset=opset)
        assert_same_values(compute_sync(nox.pow(1.5, scalar_base, opset=opset)), expected)


@pytest.mark.parametrize(
    "yshape,axis",
    [((4, 5), None), ((3, 4), 1), ((3, 4), -3), ((2,), 0), ((5,), -1), ((1,), None)],
)
@pytest.mark.parametrize("dask_y", [False, True])
def test_pow1_legacy_broadcast(yshape, axis, dask_y, rng):
    x = pow_base(rng, (2, 3, 4, 5), F32)
    y = random_array(rng, yshape, F32)
    Y = lazy(y, tuple(max(1, n // 2) for n in yshape)) if dask_y else y
    r = nox.pow(lazy(x, (1, 2, 3, 2)), Y, opset=1, broadcast=1, axis=axis)
    expected = nox.pow(x, y, opset=1, broadcast=1, axis=axis)
    assert_same_values(compute_sync(r), expected, what=f"{yshape} axis={axis}")


def test_non_native_byte_order(rng):
    x = pow_base(rng, (12, 10), F32).astype(">f4")
    a = random_array(rng, (12, 10), np.int64).astype(">i8")
    assert_same_values(compute_sync(nox.pow(lazy(x, (5, 4)), 1.5)), nox.pow(x, 1.5))
    assert_same_values(compute_sync(nox.matmul(lazy(a, (5, 4)), a.T)), nox.matmul(a, a.T))


# --------------------------------------------------------------------------------------------
# MatMul
# --------------------------------------------------------------------------------------------
MATMUL_DTYPES = [np.int32, np.int64, np.uint32, np.uint64, F16, BF16, F32, F64]

# (A shape, A chunks, B shape, B chunks): rows, columns, contraction, batch axes, ragged.
MATMUL_LAYOUTS = [
    ((40, 30), (40, 30), (30, 20), (30, 20)),  # one block each
    ((40, 30), (16, 30), (30, 20), (30, 20)),  # row chunks
    ((40, 30), (40, 30), (30, 20), (30, 7)),  # column chunks, ragged
    ((40, 30), (40, 11), (30, 20), (30, 20)),  # contraction chunked in A only
    ((40, 30), (13, 11), (30, 20), (8, 9)),  # everything chunked, boundaries differ
    ((3, 40, 30), (2, 16, 13), (3, 30, 20), (1, 13, 20)),  # batches and contraction
    ((2, 1, 17, 9), (1, 1, 5, 4), (3, 9, 6), (2, 3, 6)),  # broadcast batches
    ((30,), (11,), (30, 20), (7, 6)),  # 1-D A
    ((40, 30), (9, 8), (30,), (12,)),  # 1-D B
    ((30,), (8,), (30,), (30,)),  # 1-D both
    ((2, 40, 30), (1, 20, 30), (30,), None),  # numpy 1-D B
    ((40, 30), None, (30, 20), (30, 5)),  # numpy A, dask B
    ((40, 0), (20, 0), (0, 20), (0, 10)),  # empty contraction
]


@pytest.mark.parametrize("layout", range(len(MATMUL_LAYOUTS)))
@pytest.mark.parametrize("dtype", MATMUL_DTYPES, ids=dtype_id)
def test_matmul_chunk_grid(layout, dtype, rng):
    ashape, achunks, bshape, bchunks = MATMUL_LAYOUTS[layout]
    a = random_array(rng, ashape, dtype)
    b = random_array(rng, bshape, dtype)
    A = a if achunks is None else lazy(a, achunks)
    B = b if bchunks is None else lazy(b, bchunks)
    r = nox.matmul(A, B)
    assert isinstance(r, da.Array)
    expected = nox.matmul(a, b)
    assert r.shape == expected.shape and r.dtype == expected.dtype
    actual = compute_sync(r)
    what = f"{ashape}/{achunks} @ {bshape}/{bchunks}"
    if is_int(np.dtype(dtype)):
        assert_same_values(actual, expected, what=what)
    else:
        assert_matmul_close(actual, a, b, what=what)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=dtype_id)
def test_half_products_round_once_after_the_chunk_sum(dtype):
    """Each contraction chunk's partial sum is exactly representable in float32 but not in
    the half type: rounding partials to the half type would lose the small terms."""
    k = 12
    a = np.ones((1, k), dtype)
    b = np.full((k, 1), 2.0**-9, dtype)
    b[0, 0] = 1.0
    b[6, 0] = 1.0  # partials: 1 + 5 * 2**-9 and 1 + 5 * 2**-9 -> sum 2 + 10 * 2**-9
    r = compute_sync(nox.matmul(lazy(a, (1, 6)), lazy(b, (6, 1))))
    exact = np.float32(2 + 10 * 2.0**-9)
    assert r.dtype == dtype
    assert r[0, 0] == exact.astype(dtype)


@pytest.mark.parametrize("dtype", [F32, F64, F16, BF16], ids=dtype_id)
def test_chunk_sums_overflow_and_cancel_without_warnings(dtype):
    """Finite partials whose sum overflows (row 0: in the sum, or for the half types in the
    rounding of a float32 sum), and inf - inf across chunks (row 1): IEEE results, silently,
    as in memory."""
    # (float16: twice 60000 is finite in float32, beyond float16's range)
    big = 60000.0 if dtype == F16 else float(max_finite(dtype))
    a = np.array([[big, 0, big, 0], [np.inf, 0, -np.inf, 0]], dtype)
    b = np.ones((4, 1), dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = compute_sync(nox.matmul(lazy(a, (2, 2)), lazy(b, (2, 1))))
    assert_same_values(r, np.array([[np.inf], [np.nan]], dtype))


def test_integer_chunk_sums_wrap_like_the_in_memory_product():
    info = np.iinfo(np.int32)
    a = np.full((3, 64), info.max, np.int32)
    b = np.full((64, 2), info.max, np.int32)
    r = compute_sync(nox.matmul(lazy(a, (2, 5)), lazy(b, (7, 1))))
    assert_same_values(r, nox.matmul(a, b))


# --------------------------------------------------------------------------------------------
# Decided at the call: errors, laziness, no import of dask
# --------------------------------------------------------------------------------------------
def _message(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


ERROR_CASES = [
    ("pow", (np.int32, (6, 4)), (np.float32, ()), {"opset": 7}),
    ("pow", (np.float32, (6, 4)), (np.float64, (6, 4)), {"opset": 7}),
    ("pow", (np.float32, (6, 4)), (np.float32, (5,)), {}),
    ("pow", (np.float32, (6, 4)), (np.float32, (4,)), {"opset": 1}),
    ("pow", (np.float32, (6, 4)), (np.float32, (4,)), {"opset": 1, "broadcast": 1, "axis": 0}),
    ("pow", (np.float32, (6, 4)), (np.float32, (6,)), {"opset": 1, "broadcast": 1, "axis": -3}),
    ("pow", (np.float32, (6, 4)), (np.float32, (4,)), {"broadcast": 1}),
    ("pow", (np.float32, (6, 4)), (np.float32, (4,)), {"opset": 0}),
    ("pow", (np.float32, (6, 4)), (np.float32, (4,)), {"opset": 99}),
    ("pow", (np.float32, (6, 4)), (np.float32, (4,)), {"opset": "13"}),
    ("pow", (BF16, (6, 4)), (np.float32, ()), {"opset": 12}),
    ("matmul", (np.int32, (6, 4)), (np.int32, (4, 3)), {"opset": 8}),
    ("matmul", (np.float32, (6, 4)), (np.float64, (4, 3)), {}),
    ("matmul", (np.float32, (6, 4)), (np.float32, (5, 3)), {}),
    ("matmul", (np.float32, (2, 6, 4)), (np.float32, (3, 4, 3)), {}),
    ("matmul", (np.float32, ()), (np.float32, (4, 3)), {}),
    ("matmul", (BF16, (6, 4)), (BF16, (4, 3)), {"opset": 9}),
    ("matmul", (np.float32, (6, 4)), (np.float32, (4, 3)), {"opset": 99}),
    ("matmul", (np.float32, (6, 4)), (np.float32, (4, 3)), {"opset": 13.0}),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: f"{c[0]}-{c[3]}")
@pytest.mark.parametrize("which", ["first", "second", "both"])
def test_errors_at_the_call_match_the_in_memory_call(case, which):
    op, (adt, ashape), (bdt, bshape), kwargs = case
    a = np.ones(ashape, adt)
    b = np.ones(bshape, bdt)
    calls = []
    A = lazy(a, -1, calls) if which in ("first", "both") and a.ndim else a
    B = lazy(b, -1, calls) if which in ("second", "both") and b.ndim else b
    func = getattr(nox, op)
    expected = _message(lambda: func(a, b, **kwargs))
    assert _message(lambda: func(A, B, **kwargs)) == expected
    assert calls == []


def test_building_computes_no_block(rng):
    calls = []
    x = lazy(random_array(rng, (20, 12), F32), (5, 4), calls)
    y = lazy(random_array(rng, (12,), F32), (4,), calls)
    a = lazy(random_array(rng, (20, 12), np.int64), (5, 4), calls)
    b = lazy(random_array(rng, (12, 6), np.int64), (4, 3), calls)
    graphs = [nox.pow(x, 3.7), nox.pow(x, y), nox.pow(x, y, opset=1, broadcast=1)]
    graphs += [nox.matmul(a, b), nox.matmul(a[0], b), nox.matmul(a, b[:, 0])]
    assert calls == []
    for g in graphs:
        compute_sync(g)
    assert calls


def test_out_is_refused_for_dask_operands(rng):
    x = random_array(rng, (4, 4), F32)
    with pytest.raises(TypeError, match="out= is not supported"):
        nox.pow(lazy(x, 2), 2.0, out=np.empty_like(x))
    with pytest.raises(TypeError, match="out= is not supported"):
        nox.matmul(lazy(x, 2), x, out=np.empty_like(x))


def test_unknown_chunk_sizes_are_refused(rng):
    x = lazy(random_array(rng, (10,), F32), 5)
    filtered = x[x > 0]  # chunk sizes unknown until computed
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        nox.pow(filtered, 2.0)


def test_importing_the_package_does_not_import_dask():
    code = (
        "import sys, numpy as np, numba_onnx_ops as nox\n"
        "nox.pow(np.float32([2]), 2.0)\n"
        "assert not any(m == 'dask' or m.startswith('dask.') for m in sys.modules), 'dask'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


# --------------------------------------------------------------------------------------------
# Threads: each task's kernels on its share of the cores; results independent of it
# --------------------------------------------------------------------------------------------
def test_task_thread_shares():
    import numba

    from numba_onnx_ops.integrations import dask_arrays as _dask

    pool = numba.config.NUMBA_NUM_THREADS
    # The synchronous scheduler runs tasks one at a time in the calling thread: every core.
    assert _dask.task_threads(100) == pool
    seen = {}

    def probe(ntasks):
        seen[ntasks] = _dask.task_threads(ntasks)

    with dask.config.set(num_workers=2):
        for ntasks in (1, 2, 50):
            t = threading.Thread(target=probe, args=(ntasks,))
            t.start()
            t.join()
    assert seen[1] == min(pool, 2)  # one task owns both worker threads' cores
    assert seen[2] == 1 and seen[50] == 1


@pytest.mark.parametrize("dtype", [F32, np.dtype(np.int32), F16], ids=dtype_id)
def test_results_do_not_depend_on_the_scheduler(dtype, rng):
    a = random_array(rng, (64, 48), dtype)
    b = random_array(rng, (48, 40), dtype)
    products = nox.matmul(lazy(a, (16, 48)), lazy(b, (48, 20)))
    powers = nox.pow(lazy(a, (16, 12)), 3 if is_int(a.dtype) else 2.5)
    for g in (products, powers):
        one = g.compute(scheduler="synchronous")
        many = g.compute(scheduler="threads", num_workers=2)
        assert_same_values(many, one)


# --------------------------------------------------------------------------------------------
# dask.distributed
# --------------------------------------------------------------------------------------------
def test_local_cluster_with_worker_processes(rng):
    distributed = pytest.importorskip("distributed")
    x = pow_base(rng, (40, 30), F32)
    a = random_array(rng, (40, 30), np.int32)
    b = random_array(rng, (30, 20), np.int32)
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            worker_dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        powers, products = client.compute(
            [nox.pow(lazy(x, (10, 30)), 3.7), nox.matmul(lazy(a, (10, 12)), lazy(b, (12, 10)))],
            sync=True,
        )
        from numba_onnx_ops.integrations import dask_arrays as _dask

        workers = list(client.scheduler_info()["workers"])
        shares = client.gather(
            [client.submit(_dask.task_threads, 8, workers=[w], pure=False) for w in workers]
        )
    assert_same_values(powers, nox.pow(x, 3.7))
    assert_same_values(products, nox.matmul(a, b))
    assert shares == [1, 1]  # one worker thread each: one core per task


# --------------------------------------------------------------------------------------------
# Larger than memory: zarr to zarr
# --------------------------------------------------------------------------------------------
def test_zarr_stream_keeps_memory_bounded(tmp_path):
    """Both stages stream an input four times larger than the memory they may add."""
    pytest.importorskip("zarr")
    nbytes, chunk = 128 << 20, 1 << 20
    code = f"""
import json
from numba_onnx_ops.integrations import zarr_stream as _stream
d = _stream.prepare({str(tmp_path)!r}, {nbytes}, chunk_bytes={chunk})
_stream.warm(d)  # compile outside the measured stages
report = _stream.run(d)
_stream.check(d)
print(json.dumps(report))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert len(report) == 2
    for name, stage in report.items():
        grew = stage["peak_rss"][0] - stage["rss_before"][0]
        assert grew < nbytes / 4, f"{name}: resident memory grew by {grew / 2**20:.0f} MiB"


# --------------------------------------------------------------------------------------------
# ONNX models on dask arrays
# --------------------------------------------------------------------------------------------
def test_backend_runs_models_lazily_on_dask_inputs(rng):
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper

    from numba_onnx_ops.backend import Backend

    w = random_array(rng, (12, 5), np.int64)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Pow", ["xw", "e"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.INT64, [30, 12])],
        [helper.make_tensor_value_info("z", onnx.TensorProto.INT64, [30, 5])],
        initializer=[
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(np.array(3, np.int64), "e"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    x = random_array(rng, (30, 12), np.int64)
    calls = []
    (z,) = Backend.prepare(model).run([lazy(x, (7, 5), calls)])
    assert isinstance(z, da.Array) and calls == []
    (expected,) = Backend.prepare(model).run([x])
    assert_same_values(compute_sync(z), expected)
    untouched = []
    with pytest.raises(TypeError, match="must be int64"):
        Backend.prepare(model).run([lazy(x.astype(np.int32), 7, untouched)])
    assert untouched == []
