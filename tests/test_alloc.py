"""Large results reuse the memory of dropped results, never of live ones."""

from __future__ import annotations

import concurrent.futures
import gc
import threading
import weakref

import numpy as np
import pytest

import numba_onnx_ops as nox
from numba_onnx_ops import tuning
from numba_onnx_ops.ops.matmul import own
from numba_onnx_ops.runtime import memory as _alloc

BIG = (tuning.POOL_MIN_BYTES // 4 // 1000 + 1, 1000)  # just over the pool threshold in float32


@pytest.fixture(autouse=True)
def _empty_pool():
    nox.release_memory()
    yield
    nox.release_memory()


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_small_results_bypass_the_pool():
    nox.pow(np.ones((100, 100), np.float32), 2.0)
    assert _alloc._blocks == []


def test_a_dropped_result_is_reused_and_fully_overwritten():
    x = np.full(BIG, 3.0, np.float32)
    first = nox.pow(x, 2.0)
    where = _address(first)
    del first
    second = nox.pow(x + 1, 2.0)
    assert _address(second) == where
    assert np.all(second == 16.0)
    assert second.flags.c_contiguous and second.flags.aligned and second.flags.writeable
    assert _address(second) % 64 == 0


@pytest.mark.parametrize("keep", ["result", "view", "memoryview", "child"])
def test_memory_still_referenced_is_never_reused(keep):
    x = np.full(BIG, 3.0, np.float32)
    first = nox.pow(x, 2.0)
    held = {
        "result": first,
        "view": first[::7, 1:],
        "memoryview": memoryview(first),
        "child": first.reshape(-1)[5:].view(np.int32),
    }[keep]
    del first
    second = nox.pow(x, 3.0)
    assert not np.shares_memory(np.asarray(held), second)
    assert np.all(np.asarray(held).view(np.float32) == 9.0)
    assert np.all(second == 27.0)


def test_other_sizes_release_free_blocks():
    x = np.ones(BIG, np.float32)
    nox.pow(x, 2.0)  # dropped at once
    assert len(_alloc._blocks) == 1
    y = np.ones((BIG[0] * 2, BIG[1]), np.float32)
    z = nox.pow(y, 2.0)
    assert len(_alloc._blocks) == 1 and np.shares_memory(_alloc._blocks[0], z)


def test_release_memory_keeps_live_results():
    z = nox.pow(np.full(BIG, 2.0, np.float32), 2.0)
    nox.pow(np.full(BIG, 2.0, np.float64), 2.0)  # dropped
    nox.release_memory()
    assert len(_alloc._blocks) == 1 and np.shares_memory(_alloc._blocks[0], z)
    assert np.all(z == 4.0)


def test_threads_never_share_a_block():
    x = np.full(BIG, 2.0, np.float32)

    def work(i: int) -> bool:
        ok = True
        for _ in range(4):
            z = nox.pow(x, np.float32(i))
            ok &= bool(np.all(z == np.float32(2.0**i)))
        return ok

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(2, 10)))
    assert len(_alloc._blocks) <= _alloc._MAX_BLOCKS


def test_out_overlapping_an_input_goes_through_the_pool_safely():
    x = np.full(BIG, 3.0, np.float32)
    nox.pow(x, 2.0, out=x)
    assert np.all(x == 9.0)


def _kept_buffers() -> list:
    return [kept.buf for kept in list(_alloc._kept) if kept.buf is not None]


def _half_product(rng) -> tuple:
    """A float16 product whose float32 copies go through a thread's kept scratch buffer, and
    numpy's float32 product of the same operands (exact: small integers)."""
    a = rng.integers(-3, 4, (32, 256)).astype(np.float16)
    b = rng.integers(-3, 4, (256, 256)).astype(np.float16)
    return nox.matmul(a, b), (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)


_SCRATCH_TAKEN = pytest.mark.skipif(
    not own.vector_bits(), reason="no vector micro-kernel: these products take no scratch"
)


@_SCRATCH_TAKEN
def test_release_memory_drops_the_scratch_threads_keep():
    rng = np.random.default_rng(5)
    computed, released = threading.Event(), threading.Event()
    got = {}

    def worker():
        got["first"] = _half_product(rng)
        computed.set()
        released.wait(30)
        got["again"] = _half_product(rng)  # a fresh buffer, the same results

    thread = threading.Thread(target=worker)
    thread.start()
    computed.wait(30)
    _half_product(rng)
    kept = [weakref.ref(buf) for buf in _kept_buffers()]
    assert len(kept) == 2, "the calling thread's buffer and the worker's"
    nox.release_memory()
    assert _kept_buffers() == []
    gc.collect()
    assert [ref() for ref in kept] == [None, None]
    released.set()
    thread.join()
    for computed_, expected in (got["first"], got["again"]):
        assert np.array_equal(computed_, expected)


@_SCRATCH_TAKEN
def test_a_finished_threads_scratch_goes_with_it():
    rng = np.random.default_rng(6)
    nox.release_memory()
    thread = threading.Thread(target=_half_product, args=(rng,))
    thread.start()
    thread.join()
    gc.collect()
    assert _kept_buffers() == []
