"""The own pool (``runtime.pool``): task twins, claims from both ends, jobs, errors, sleep and
wake, one thread, several threads, fork."""

from __future__ import annotations

import concurrent.futures
import os

import numba
import numpy as np
import pytest
from child import run_python
from numba import prange

from numba_onnx_ops import tuning
from numba_onnx_ops.runtime import parallel, pool
from numba_onnx_ops.runtime.jit import kernel

pytestmark = pytest.mark.skipif(not pool.available(), reason="the own pool runs on Linux x86-64")


@kernel(parallel=True)
def count_tasks(out, work):
    """out[t] += 1 for every task t, each after ``work`` turns of a loop (so that the tasks
    take long enough for several threads to claim some)."""
    n = out.size
    for t in prange(n):
        s = 0.0
        for r in range(work):
            s += np.sqrt(r + t)
        out[t] += 1 + 0 * s


@kernel(parallel=True)
def raise_at(out, bad):
    """out[t] = t, but task ``bad`` raises (every task where ``bad`` is negative)."""
    for t in prange(out.size):
        if t == bad or bad < 0:
            raise ValueError("task")
        out[t] = t


@kernel(parallel=True)
def meet(seen, spins):
    """Two tasks that each wait (up to ``spins`` turns) for the other to start: where they
    run at once, on two threads, both see the other and set their flag ``seen[1 + t]``; one
    thread running both in turn gives up in the first."""
    for t in prange(2):
        pool.add(seen, 0, 1)
        turns = 0
        while pool.load(seen, 0) < 2 and turns < spins:
            turns += 1
        if pool.load(seen, 0) >= 2:
            seen[1 + t] = 1


def _tasks(n: int, work: int, threads: int = 2):
    out = np.zeros(n, np.int64)
    go = parallel.pool_runner(count_tasks, (out, work))
    with numba_threads(threads):
        go(_helpers(), out, work)
    return out


def _helpers() -> int:
    """The workers a runner may take on the calling thread: its thread count less one."""
    return numba.get_num_threads() - 1


class numba_threads:
    """``numba.set_num_threads(n)`` for a block, the count before restored after."""

    def __init__(self, n: int):
        self.n = min(n, numba.config.NUMBA_NUM_THREADS)

    def __enter__(self):
        self.saved = numba.get_num_threads()
        numba.set_num_threads(self.n)

    def __exit__(self, *exc):
        numba.set_num_threads(self.saved)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 64, 1001])
@pytest.mark.parametrize("threads", [1, 2])
def test_every_task_runs_once(n, threads):
    """However the caller (from the front) and the workers (from the back) share the tasks,
    each runs exactly once."""
    for work in (0, 200):
        for _ in range(20):
            assert (_tasks(n, work, threads) == 1).all()


def test_a_worker_shares_the_job():
    """With more than one thread, a worker runs tasks of the job at the same time as the
    caller (a worker busy elsewhere, or asleep, may miss a job now and then: some tries)."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one thread")
    seen = np.zeros(3, np.int64)
    go = parallel.pool_runner(meet, (seen, 0))
    with numba_threads(2):
        for _ in range(50):
            seen[:] = 0
            go(_helpers(), seen, 10**8)
            if (seen == [2, 1, 1]).all():
                break
    assert (seen == [2, 1, 1]).all()
    with numba_threads(1):  # (the same, alone: the first task gives up)
        seen[:] = 0
        go(_helpers(), seen, 10**4)
        assert (seen == [2, 0, 1]).all()


def test_one_thread_opens_no_job():
    out = np.zeros(50, np.int64)
    go = parallel.pool_runner(count_tasks, (out, 0))
    gen = pool.pool().ctrl[pool._GEN]
    with numba_threads(1):
        go(_helpers(), out, 0)
    assert (out == 1).all()
    assert pool.pool().ctrl[pool._GEN] == gen


@pytest.mark.parametrize("where", ["first", "last", "every"])
def test_a_task_that_raises_raises_in_the_caller(where):
    """A task that raises, on the calling thread or on a worker, raises ``RuntimeError`` once
    every thread has left the job; the pool runs the next job as before."""
    out = np.zeros(16, np.int64)
    go = parallel.pool_runner(raise_at, (out, 0))
    bad = {"first": 0, "last": 15, "every": -1}[where]
    with numba_threads(2):
        raised = RuntimeError if numba.get_num_threads() > 1 else ValueError
        for _ in range(5):
            with pytest.raises(raised):
                go(_helpers(), out, bad)
        go(_helpers(), out, 99)  # (no task raises)
    assert (out == np.arange(16)).all()
    assert pool.pool().ctrl[pool._FAILED] == 0


def test_workers_sleep_after_their_spin_and_wake_for_a_job():
    """Every worker goes to sleep once it has spun ``POOL_SPIN_US`` without a job, and wakes for
    the next, which it shares.  In a fresh process, so that the count of sleeping workers is
    this test's alone.  The wait is long: a worker queued on a CPU that the host does not run
    (a virtual machine's vCPU can stall for seconds) counts itself asleep only once it runs."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one thread")
    code = """
        import sys, time
        sys.path.insert(0, sys.argv[1])
        import numpy as np
        import test_pool
        from numba_onnx_ops import tuning
        from numba_onnx_ops.runtime import parallel, pool

        p = pool.pool()
        assert (test_pool._tasks(4, 0) == 1).all()
        for job in range(3):
            deadline = time.monotonic() + 120
            while p.ctrl[pool._SLEEPING] != p.workers and time.monotonic() < deadline:
                time.sleep(tuning.POOL_SPIN_US * 4e-6)
            words = {w: int(p.ctrl[getattr(pool, w)]) for w in ("_GEN", "_ACTIVE", "_SLEEPING")}
            assert p.ctrl[pool._SLEEPING] == p.workers, f"after job {job}: {words}"
            seen = np.zeros(3, np.int64)  # (woken, a worker runs one of two tasks that meet)
            go = parallel.pool_runner(test_pool.meet, (seen, 0))
            for _ in range(50):
                seen[:] = 0
                go(1, seen, 10**8)
                if (seen == [2, 1, 1]).all():
                    break
            assert (seen == [2, 1, 1]).all(), f"no worker woke for job {job}: {seen}"
        print("ok")
    """
    assert run_python(code, os.path.dirname(__file__)).split() == ["ok"]


def test_the_workers_compile_nothing(tmp_path):
    """The workers' loop (``serve``) is compiled, or loaded from the cache, by the thread that
    starts the pool, before any worker runs: a worker that compiled it held the GIL for a
    fraction of a second, and every call the caller made meanwhile, each of which lets the GIL
    go, waited for the interpreter's switch interval to take it back.  In a fresh process with
    an empty cache, where every kernel is compiled: all on the calling thread."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one thread")
    code = """
        import sys, threading
        sys.path.insert(0, sys.argv[1])
        from numba.core import event
        import test_pool
        from numba_onnx_ops.runtime import pool

        where = []

        class Compiles(event.Listener):
            def on_start(self, ev):
                fn = ev.data.get("dispatcher")
                where.append((getattr(fn, "__name__", fn), threading.current_thread().name))

            def on_end(self, ev):
                pass

        event.register("numba:compile", Compiles())
        pool.pool()
        assert ("serve", "MainThread") in where, where
        assert (test_pool._tasks(64, 100) == 1).all()
        assert {thread for _, thread in where} == {"MainThread"}, where
        print("ok")
    """
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    assert run_python(code, os.path.dirname(__file__), env=env).split() == ["ok"]


def test_jobs_from_several_threads():
    """Python threads that call at once: one job holds the pool, the others run alone; every
    task of every call runs once."""

    def calls(seed):
        rng = np.random.default_rng(seed)
        return all((_tasks(int(rng.integers(0, 300)), 100) == 1).all() for _ in range(30))

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert all(ex.map(calls, range(8), timeout=300))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_starts_its_own_workers():
    """A child forked after the parent's pool started has none of the parent's workers: it
    starts its own, and shares its jobs with them, also those of plans the parent made."""
    code = """
        import os, sys, threading
        import numpy as np
        sys.path.insert(0, sys.argv[1])
        import test_pool
        import numba_onnx_ops as nox
        from numba_onnx_ops.runtime import pool
        a = np.ones((64, 256), np.float32)
        want = nox.matmul(a, a.T)  # (a plan on the pool, kept)
        assert (test_pool._tasks(100, 100) == 1).all()
        parent = pool.pool()
        pid = os.fork()
        if pid == 0:
            ok = (test_pool._tasks(100, 100) == 1).all() and pool.pool() is not parent
            child = pool.pool()
            names = [t.name for t in threading.enumerate()]
            ok = ok and sum(n.startswith("numba_onnx_ops-") for n in names) == parent.workers
            opened = child.ctrl[pool._GEN]
            ok = ok and (nox.matmul(a, a.T) == want).all()
            ok = ok and child.ctrl[pool._GEN] == opened + 2  # (its job, on the child's pool)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print("ok" if os.waitstatus_to_exitcode(status) == 0 else "child failed")
    """
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one thread")
    assert run_python(code, os.path.dirname(__file__)).split() == ["ok"]


def test_the_twin_claims_its_tasks_in_the_prange_loop():
    """The rewritten loop: the count once, a claim per turn, and a stop when none is left."""
    twin = pool.task_twin(count_tasks)
    names = twin.__code__.co_varnames
    assert names[: 2 + 4] == ("out", "work", "_claims", "_pool", "_helpers", "_self")
    assert {"_n", "_i", "t"} <= set(names)
    assert "claim" in twin.__code__.co_names and "run" in twin.__code__.co_names
    assert "prange" not in twin.__code__.co_names


def test_a_kernel_without_one_prange_has_no_twin():
    def two(out):
        for t in prange(3):
            out[t] = 0
        for t in prange(3):
            out[t] = 1

    with pytest.raises(TypeError, match="exactly one"):
        pool.task_twin(numba.njit(two))


def test_matmul_runner_takes_writable_and_read_only_operands_on_one_twin():
    """A MatMul plan on the own pool compiles its task twin for read-only operand buffers at
    its first call and then passes its operands as they are: writable or read-only, the calls
    compile nothing more and give the same bits as one thread's."""
    if numba.config.NUMBA_NUM_THREADS < 2 or not tuning.OWN_POOL:
        pytest.skip("the own pool runs MatMul on more than one thread only")
    import numba_onnx_ops as nox
    from numba_onnx_ops.ops.matmul import kernels

    rng = np.random.default_rng(7)
    a = rng.standard_normal((64, 128)).astype(np.float32)  # (2^19 multiply-adds: the pool's)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    a_ro, b_ro = a.copy(), b.copy()
    a_ro.flags.writeable = b_ro.flags.writeable = False
    pairs = ((a, b), (a_ro, b_ro), (a, b_ro))
    with numba_threads(1):
        alone = nox.matmul(a, b)
    twin = pool.tasks_of(kernels.matmul_vector)
    with numba_threads(2):
        nox.matmul(a, b)  # (a first call compiles the twin, if no product has yet)
        compiled = set(twin.signatures)
        results = [nox.matmul(x, y) for _ in range(3) for x, y in pairs]
    assert set(twin.signatures) == compiled
    for r in results:
        assert np.array_equal(r.view(np.uint32), alone.view(np.uint32))
