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

from spies import Launches, spy_on_kernels  # noqa: E402 - (from the path above)

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


@pytest.fixture(autouse=True)
def fresh_plans():
    """No call plan outlives a test: tests change ``tuning`` and replace the package's
    functions, and a plan made earlier would keep what they decided then."""
    plans = importlib.import_module("numba_onnx_ops.core.plans")
    plans.clear()
    yield
    plans.clear()


@pytest.fixture
def launches(monkeypatch) -> Launches:
    """The kernels the package runs during the test, in order, by their pool kernel's name
    (a calling thread's kernel or serial twin, ``<name>_here``, as ``<name>``), and "blas" for
    each product handed to numpy's BLAS; ``launches.pool`` and ``launches.here`` list those
    run on the pool and on the calling thread (``spies.py``)."""
    seen = Launches()
    spy_on_kernels(monkeypatch, seen.add)
    return seen
