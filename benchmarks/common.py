"""What the benchmark modules share: dtype lists from the library's own tables, shapes, seeded
inputs and a throughput timer for ``track_*`` benchmarks.

Only the public API of numba_onnx_ops is used, so the suite also runs against older commits.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import ml_dtypes
import numpy as np

import numba_onnx_ops

#: Set by tests/test_benchmarks.py: every dimension is cut to TINY_DIM, so that the whole
#: parameter grid runs in seconds (cutting with min() keeps equal dimensions equal and 1s as 1s,
#: so every broadcasting pattern and code path survives).
TINY = False
TINY_DIM = 7

# A fixed order, so that the parameter grids (and asv's history) do not depend on set order.
_ORDER = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64")
_ORDER += ("uint8", "uint16", "uint32", "uint64")


def _names(dtypes) -> list[str]:
    return sorted((np.dtype(d).name for d in dtypes), key=_ORDER.index)


_NEWEST_POW = max(numba_onnx_ops.POW_TYPES)
#: Every dtype MatMul allows (the newest version allows them all).
MATMUL_DTYPES = _names(numba_onnx_ops.MATMUL_TYPES[max(numba_onnx_ops.MATMUL_TYPES)])
#: Every dtype of Pow's X (T) and of its exponent Y (T1), newest version.
POW_X_DTYPES = _names(numba_onnx_ops.POW_TYPES[_NEWEST_POW][0])
POW_Y_DTYPES = _names(numba_onnx_ops.POW_TYPES[_NEWEST_POW][1])
#: Pow-1's types: the version with the legacy ``broadcast``/``axis`` attributes.
POW1_DTYPES = _names(numba_onnx_ops.POW_TYPES[1][0])


def dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def shape(*dims: int) -> tuple[int, ...]:
    """``dims``, or cut to TINY_DIM per dimension under the tests."""
    return tuple(min(d, TINY_DIM) for d in dims) if TINY else dims


def random_array(
    rng: np.random.Generator,
    dims: tuple[int, ...],
    dtype_name: str,
    floats: tuple[float, float] = (-1.0, 1.0),
    ints: tuple[int, int] = (-100, 100),
) -> np.ndarray:
    """Uniform floats in ``floats`` or integers in ``ints`` (negatives dropped for unsigned)."""
    dt = dtype(dtype_name)
    if dt.kind in "iu":
        low = max(ints[0], 0) if dt.kind == "u" else ints[0]
        return rng.integers(low, ints[1], size=dims).astype(dt)
    return rng.uniform(*floats, size=dims).astype(dt)


def seconds_per_call(func: Callable[[], object], min_time: float = 0.25) -> float:
    """Median seconds per call over at least 3 calls and ``min_time`` (one call under tests)."""
    if TINY:
        min_time = 0.0
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < (1 if TINY else 3) or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        func()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


class ForcedTuning:
    """Benchmarks of one decision's sides: ``force`` sets values of ``numba_onnx_ops.tuning``
    and clears the call plans (which keep the decisions made with the old values); ``teardown``
    puts the values back and clears the plans again.  Skips where those internals are missing."""

    def force(self, **values):
        try:
            from numba_onnx_ops import tuning
            from numba_onnx_ops.core import plans
        except ImportError:
            raise NotImplementedError("no numba_onnx_ops.core.plans") from None  # asv: skip
        missing = [name for name in values if not hasattr(tuning, name)]
        if missing:
            raise NotImplementedError(f"no tuning.{missing[0]}")  # asv: skip
        self._tuning, self._plans = tuning, plans
        self._saved = {name: getattr(tuning, name) for name in values}
        for name, value in values.items():
            setattr(tuning, name, value)
        plans.clear()

    def teardown(self, *params):
        for name, value in getattr(self, "_saved", {}).items():
            setattr(self._tuning, name, value)
        if hasattr(self, "_plans"):
            self._plans.clear()
