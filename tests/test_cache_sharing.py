"""numba's on-disk cache filled by several processes at once (test workers, a pool of servers):
a kernel runs only machine code compiled for the argument types it is called with."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from oracles import assert_pow_matches

import numba_onnx_ops as nox
from numba_onnx_ops.ops.pow import kernels
from numba_onnx_ops.runtime import jit


@pytest.mark.parametrize("other", [np.float32, np.int64], ids=["other-item-size", "same-item-size"])
def test_a_cached_kernel_of_other_argument_types_never_runs(tmp_path, monkeypatch, other):
    """numba's index names one data file per signature.  Two processes that save new signatures
    of one kernel at once both take the first free file name; where the index one writes lands
    last and the data the other writes lands last, the index names, for the first signature,
    the machine code of the second.  A process that then calls the first signature must compile
    it, not run that code: with arrays of another item size it raised ``TypeError`` ("can't
    unbox array"), with arrays of the same item size it gave wrong values.

    Each process is a dispatcher of the same calling thread's kernel, cached in ``tmp_path``,
    that Pow runs in its place; the interleaving of the two processes' writes is replayed on the
    cache's files: the second reads the index before the first writes it."""
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    here = kernels.pow_general_here

    def process():
        kernel = jit.kernel(slp=here.slp, **here.jit_options)(here.py_func)
        monkeypatch.setitem(kernels.HERE, kernels.pow_general, kernel)
        return kernel

    x = np.array([-1.0, 1.5, -0.5, 2.0, 0.0], np.float32)[:, None]
    y = np.array([2**63, 2**64 - 1, 3], np.uint64)[None, :]  # (in a calling thread's call)
    process()
    assert_pow_matches(nox.pow(x, y), x, y)  # compiled, saved as the first data file
    (index,) = tmp_path.rglob(f"*{here.py_func.__name__}*.nbi")
    written = index.read_bytes()
    index.unlink()

    second = process()
    y_other = np.array([2, -1, 3], other)[None, :]
    assert_pow_matches(nox.pow(x, y_other), x, y_other)  # saved as the first data file too
    index.write_bytes(written)  # the first process's index write lands last

    assert_pow_matches(nox.pow(x, y), x, y)
    assert len(second.overloads) == 2

    later = process()  # the compile replaced the data file the index names
    assert_pow_matches(nox.pow(x, y), x, y)
    assert sum(later.stats.cache_hits.values()) == 1
    assert not later.stats.cache_misses
