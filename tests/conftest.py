"""Shared fixtures and hypothesis settings.

numba compiles one specialisation per dtype combination on first use (about 1-2 s each), so
property tests keep their example counts modest and have no deadline.
"""

from __future__ import annotations

import importlib
import os
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))  # `import oracles` from every test module

settings.register_profile(
    "default",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=400)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's id: reproducible, different per test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def launches(monkeypatch) -> list[str]:
    """The names of the kernels the package launches during the test, in order, and "blas"
    for each product handed to numpy's BLAS."""
    seen: list[str] = []
    parallel = importlib.import_module("numba_onnx_ops.runtime.parallel")
    blas = importlib.import_module("numba_onnx_ops.ops.matmul.blas")

    def launch(kernel, *args, _real=parallel.launch):
        seen.append(kernel.py_func.__name__)
        return _real(kernel, *args)

    def blas_matmul(*args, _real=blas.matmul, **kwargs):
        seen.append("blas")
        return _real(*args, **kwargs)

    # Every kernel launch and every BLAS call goes through these two names.
    monkeypatch.setattr(parallel, "launch", launch)
    monkeypatch.setattr(blas, "matmul", blas_matmul)
    return seen
