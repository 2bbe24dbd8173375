"""Reliability: threads, fork and spawn, nothing compiled at import, unwritable caches, odd
containers."""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import platform
import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import workload  # tests/, on the path from conftest.py
from child import run_python
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import assert_matmul_close, assert_pow_matches

import numba_onnx_ops as nox
from numba_onnx_ops.core import plans

BF16 = np.dtype(ml_dtypes.bfloat16)


_TESTS = str(Path(__file__).parent)
# a child process imports the workload (and the oracles beside it) from this folder
_IMPORT_WORKLOAD = f"import sys; sys.path.insert(0, {_TESTS!r}); import workload\n"


def test_workload_reaches_the_own_kernels(launches):
    """The calls the thread and process tests make run the kernels they name, where they name
    (on the pool or on the calling thread, both in the workload), and none goes to numpy's
    BLAS."""
    ops = {"matmul": nox.matmul, "pow": nox.pow}
    cases = zip(workload.CASES, workload.operands(0), strict=True)
    for (name, op, kernels, place), (_, a, b) in cases:
        for _ in range(2):  # the call that makes the plan, and one that runs it
            ops[op](a, b)
            assert len(launches) == 1 and launches[0] in kernels, (name, launches)
            assert launches.places == [place], (name, launches.places)
            launches.clear()
    places = {place for *_, place in workload.CASES}
    assert places == {workload.POOL, workload.HERE}
    assert places == {place for name, *_, place in workload.CASES if name in workload.FEW}


def test_threads_get_the_same_results_as_one_thread():
    expected = {seed: workload.run(seed) for seed in range(4)}
    for seed, results in expected.items():
        workload.check(seed, results)
    plans.clear()  # the threads make the plans, several at once, and share them
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = {pool.submit(workload.run, seed % 4): seed % 4 for seed in range(32)}
        for fut in concurrent.futures.as_completed(futures, timeout=300):
            seed, got = futures[fut], fut.result()
            workload.check(seed, got)
            for g, e in zip(got, expected[seed], strict=True):
                np.testing.assert_array_equal(g, e)


FORK_CHILD = (
    _IMPORT_WORKLOAD
    + """
import os, traceback
workload.check(0, names=workload.FEW)  # the parent's threads have run parallel kernels
pid = os.fork()
if pid == 0:
    try:
        workload.check(1, names=workload.FEW)
        code = 0
    except BaseException:
        traceback.print_exc()
        code = 3
    os._exit(code)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("layer", ["default", "omp", "workqueue"])
def test_fork_after_parallel_kernels(layer):
    out = run_python(FORK_CHILD, env={"NUMBA_THREADING_LAYER": layer}, timeout=240)
    assert out.strip() == "0"


KEPT_ENTRY_THEN_FORK = """
import os
import numpy as np
import numba_onnx_ops as nox
rng = np.random.default_rng(0)
a = rng.standard_normal((256, 256)).astype(np.float32)
want = [nox.matmul(a, a) for _ in range(4)][-1]  # (the plan keeps the kernel's entry)
pid = os.fork()
if pid == 0:
    os._exit(0 if np.array_equal(nox.matmul(a, a), want) else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("layer", ["default", "omp"])
def test_fork_after_a_plan_kept_the_pool_entry(layer):
    """A plan that launches through the kernel's compiled entry (``parallel.pool_entry``),
    called again in a child forked after it: the same result, and under ``omp`` on the
    serial twin, where libgomp's pool would abort the child."""
    env = {"NUMBA_THREADING_LAYER": layer, "NUMBA_NUM_THREADS": "2"}
    assert run_python(KEPT_ENTRY_THEN_FORK, env=env, timeout=240).strip() == "0"


@pytest.mark.parametrize("layer", ["omp", "workqueue"])
def test_threads_under_every_threading_layer(layer):
    code = (
        _IMPORT_WORKLOAD
        + """
import concurrent.futures, numba
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    list(pool.map(workload.check, [s % 3 for s in range(24)]))
print(numba.threading_layer())
"""
    )
    assert run_python(code, env={"NUMBA_THREADING_LAYER": layer}).strip() == layer


_AFFINITY = sys.platform.startswith("linux") and hasattr(os, "sched_getaffinity")


@pytest.fixture
def own_affinity():
    """The calling thread's CPU set, given back after the test."""
    saved = os.sched_getaffinity(0)
    yield saved
    os.sched_setaffinity(0, saved)


def _where_moved():
    """(CPU before, CPU after) the calling thread asks to be moved off the CPU it is on."""
    from numba import njit

    from numba_onnx_ops.runtime.schedule import current_cpu, move_off

    @njit
    def probe():
        cpu = current_cpu()
        move_off(cpu)
        return cpu, current_cpu()

    return probe()


@pytest.mark.skipif(not _AFFINITY, reason="sched_getcpu and thread affinity are Linux calls")
def test_a_thread_moved_off_a_cpu_keeps_its_cpu_set(own_affinity):
    if len(own_affinity) < 2:
        pytest.skip("this process may use one CPU only")
    # Once its CPU set is whole again, the scheduler may put the thread back at once (the other
    # CPU busy, this one idle): a move must show in some of the tries, not in each.
    moves = 0
    for _ in range(10):
        before, after = _where_moved()
        assert before in own_affinity and after in own_affinity
        moves += after != before
        assert os.sched_getaffinity(0) == own_affinity  # moved, not pinned
    assert moves > 0


@pytest.mark.skipif(not _AFFINITY, reason="sched_getcpu and thread affinity are Linux calls")
def test_a_thread_allowed_one_cpu_stays(own_affinity):
    only = min(own_affinity)
    os.sched_setaffinity(0, {only})
    assert _where_moved() == (only, only)
    assert os.sched_getaffinity(0) == {only}


def _flags_after_spread(cpu, flags):
    """The flags of a call state ``[cpu, flags]`` after the calling thread (numba's thread 0,
    the role of a kernel's caller) starts a task with it."""
    from numba import njit

    from numba_onnx_ops.runtime.schedule import spread

    @njit
    def task(state):
        spread(state)
        return state[1]

    return task(np.array([cpu, flags], np.int64))


@pytest.mark.skipif(not _AFFINITY, reason="sched_getcpu and thread affinity are Linux calls")
def test_the_caller_checks_for_its_pool_once_per_call():
    from numba import njit

    from numba_onnx_ops.runtime.schedule import (
        _CALLER_YIELDED,
        _POOL_STARTED,
        call_state,
        current_cpu,
    )

    @njit
    def fresh_state():
        state = call_state()  # on the stack: read it before it goes
        return state[0], state[1]

    cpu = njit(lambda: current_cpu())()
    state_cpu, state_flags = fresh_state()
    assert state_flags == 0 and state_cpu in os.sched_getaffinity(0)
    # no pool thread has started: the caller yields its CPU once and says so
    assert _flags_after_spread(cpu, 0) == _CALLER_YIELDED
    assert _flags_after_spread(cpu, _CALLER_YIELDED) == _CALLER_YIELDED
    # a pool thread has started: nothing to wait for
    assert _flags_after_spread(cpu, _POOL_STARTED) == _POOL_STARTED
    # an unknown CPU (no sched_getcpu) turns the whole check off
    assert _flags_after_spread(-1, 0) == 0


@pytest.mark.skipif(not _AFFINITY, reason="sched_getcpu and thread affinity are Linux calls")
def test_pool_threads_say_they_started():
    import numba
    from numba import njit, prange

    from numba_onnx_ops.runtime.schedule import _POOL_STARTED, call_state, spread

    if numba.get_num_threads() < 2:
        pytest.skip("numba runs one thread here")

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("this process may use one CPU only")

    @njit(parallel=True)
    def kernel(seen):
        state = call_state()
        for i in prange(seen.size):
            spread(state)
            s = 0.0
            for _ in range(100_000):  # about 0.1 ms: long enough for a pool thread to start
                s = s * 0.999 + 1.0
            seen[i] = numba.get_thread_id() + (s < 0)
        return state[1]

    seen = np.zeros(64, np.int64)
    for _ in range(20):
        flags = kernel(seen)
        assert bool(flags & _POOL_STARTED) == bool(seen.any())
        if seen.any():
            break
    assert seen.any(), "no pool thread took a task in 20 calls"


def test_spawn_workers():
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        # workload.check raises in the worker on a wrong result
        assert list(pool.map(workload.check, [0, 1], timeout=300)) == [None, None]


#: pyproject's marker: ``tbb`` is a dependency on these machines only
_TBB_MACHINES = {"x86_64", "AMD64"}


@pytest.mark.skipif(
    platform.machine() not in _TBB_MACHINES, reason="tbb is not a dependency on this platform"
)
def test_default_layer_is_tbb():
    out = run_python(
        """
        import numpy as np, numba, numba_onnx_ops as nox
        nox.pow(np.ones(100_000), 2.0)  # (large enough to run on the pool)
        print(numba.threading_layer())
        """,
        env={"NUMBA_THREADING_LAYER": "default"},
    )
    assert out.strip() == "tbb"


def test_tbb_marker_matches_pyproject():
    """The skip above names the same machines as the dependency's environment marker."""
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("not a source checkout")
    marker = next(line for line in pyproject.read_text().splitlines() if '"tbb' in line)
    assert set(re.findall(r"platform_machine == '([^']+)'", marker)) == _TBB_MACHINES


def test_nothing_compiles_at_import():
    """In a fresh process, importing the package (and its integrations) compiles no kernel;
    the first call compiles (or loads) its own: a small call its calling thread's kernel, a
    large one its pool kernel.  The seconds are measured by the benchmarks
    (``benchmarks/compile.py``), not asserted here."""
    code = """
    import json, numpy as np
    import numba_onnx_ops as nox, numba_onnx_ops.backend, numba_onnx_ops.reference
    before = nox.compiled_specializations()
    nox.pow(np.arange(4, dtype=np.int32), 3)
    small = nox.compiled_specializations()
    nox.pow(np.arange(100_000, dtype=np.int32), 3)
    print(json.dumps([before, small, nox.compiled_specializations()]))
    """
    before, small, large = json.loads(run_python(code))
    assert before == {}
    kernels = "numba_onnx_ops.ops.pow.kernels."
    assert small.get(kernels + "pow_cube_here", 0) >= 1, small
    assert kernels + "pow_cube" not in small, small
    assert large.get(kernels + "pow_cube", 0) >= 1, large


def test_unwritable_cache_still_works():
    """No writable cache anywhere: the kernels compile in memory and work."""
    code = (
        """
from numba.core import caching
def refuse(self):
    raise PermissionError("read-only")
caching._CacheLocator.ensure_cache_path = refuse
"""
        + _IMPORT_WORKLOAD
        + """
workload.check(0, names=workload.FEW)
print("ok")
"""
    )
    assert run_python(code, timeout=600).strip() == "ok"


@pytest.mark.slow
def test_more_than_2_31_elements():
    n = 2**31 + 3
    x = np.full(n, 1.5, np.float16)
    x[-1] = 2.0
    z = nox.pow(x, np.float16(2.0))
    assert z[0] == np.float16(2.25) and z[-1] == np.float16(4.0)
    assert np.all(z[:: 2**20] == np.float16(2.25))


# --- containers: only the container differs from a listed dtype ---------------------------


def test_non_native_byte_order():
    a = np.arange(12, dtype=">f8").reshape(3, 4)
    b = np.arange(12, dtype=">f8").reshape(4, 3)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(nox.matmul(a, b), ref)
    np.testing.assert_array_equal(nox.pow(a, np.array(2.0, ">f8")), a.astype(np.float64) ** 2)
    assert nox.pow(a, 2.0).dtype == np.float64


def test_matrix_subclass_gives_plain_ndarray():
    with pytest.warns(PendingDeprecationWarning, match="matrix subclass"):  # (on purpose)
        m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    r = nox.matmul(m, m)
    assert type(r) is np.ndarray
    np.testing.assert_array_equal(r, np.asarray(m) @ np.asarray(m))
    assert type(nox.pow(m, 2.0)) is np.ndarray


def test_lists_and_scalars():
    np.testing.assert_array_equal(nox.matmul([[1.0, 2.0]], [[3.0], [4.0]]), [[11.0]])
    np.testing.assert_array_equal(nox.pow([1.0, 2.0, 3.0], 2), [1.0, 4.0, 9.0])
    assert nox.pow(2.0, 10).item() == 1024.0


def test_masked_arrays_are_refused():
    m = np.ma.masked_array([1.0, 2.0], mask=[False, True])
    with pytest.raises(TypeError, match="masked"):
        nox.pow(m, 2.0)
    with pytest.raises(TypeError, match="masked"):
        nox.matmul(m, m)


@pytest.mark.parametrize(
    "dtype", [np.bool_, np.complex64, np.complex128, object, "U3", "S3", "i4,f4", "datetime64[s]"]
)
def test_unlisted_dtypes_are_type_errors(dtype):
    a = np.zeros((2, 2), dtype=dtype)
    f = np.ones((2, 2), np.float32)
    for call in (
        lambda: nox.matmul(a, a),
        lambda: nox.pow(a, f),
        lambda: nox.pow(f, a),
        lambda: nox.pow(a, f, opset=7),
    ):
        with pytest.raises(TypeError):
            call()


# --- random containers, dtypes, strides and byte orders ------------------------------------

_ALL = [
    np.dtype(t)
    for t in (
        np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
        np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64,
    )
] + [BF16]  # fmt: skip


@st.composite
def _arrays(draw, shape):
    dtype = draw(st.sampled_from(_ALL))
    big = draw(st.booleans()) and dtype.itemsize > 1 and dtype != BF16
    step = draw(st.sampled_from([1, 2, -1]))
    full = tuple(n * abs(step) for n in shape)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        base = rng.integers(max(info.min, -5), min(info.max, 5), full, endpoint=True).astype(dtype)
    else:
        base = (rng.standard_normal(full) * 3).astype(dtype)
    if big:
        base = base.astype(dtype.newbyteorder(">"))
    view = base[tuple(slice(None, None, step) for _ in shape)]
    if draw(st.booleans()):
        view = np.asfortranarray(view)
    return view


def _native(a):
    return a.astype(a.dtype.newbyteorder("="))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_matmul_inputs(data):
    m, k, n = (data.draw(st.integers(1, 9)) for _ in range(3))
    a = data.draw(_arrays((m, k)))
    b = data.draw(_arrays((k, n)))
    opset = data.draw(st.sampled_from([1, 9, 13]))
    allowed = nox.MATMUL_TYPES[nox.resolve_version("MatMul", opset)]
    na, nb = _native(a).dtype, _native(b).dtype
    if na not in allowed or nb not in allowed or na != nb:
        with pytest.raises(TypeError):
            nox.matmul(a, b, opset=opset)
        return
    got = nox.matmul(a, b, opset=opset)
    assert got.dtype == na and got.shape == (m, n)
    assert_matmul_close(got, _native(a), _native(b))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_pow_inputs(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    x = data.draw(_arrays(shape))
    y = data.draw(_arrays(shape[data.draw(st.integers(0, len(shape))) :]))
    opset = data.draw(st.sampled_from([7, 12, 13, 15]))
    version = nox.resolve_version("Pow", opset)
    t, t1 = nox.POW_TYPES[version]
    nx, ny = _native(x).dtype, _native(y).dtype
    if nx not in t or ny not in t1 or (version < 12 and nx != ny):
        with pytest.raises(TypeError):
            nox.pow(x, y, opset=opset)
        return
    got = nox.pow(x, y, opset=opset)
    assert got.dtype == nx and got.shape == np.broadcast_shapes(x.shape, y.shape)
    assert_pow_matches(got, _native(x), _native(y))
