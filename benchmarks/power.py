"""Pow benchmarks on 10 million elements: exponent classes, broadcasting layouts, dtype pairs.

Bases are positive floats in [0.25, 4) (a fractional power of a negative base is NaN, the
special-value path) or integers in [-1000, 1000); array exponents are floats in [-3, 3) or
integers in [0, 4).  Every class warms up in ``setup``, so ``time_*`` results hold no compile time.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from numba_onnx_ops import pow  # noqa: A004 - the ONNX operator's name

from .common import (
    POW1_DTYPES,
    POW_X_DTYPES,
    POW_Y_DTYPES,
    dtype,
    random_array,
    seconds_per_call,
    shape,
)

ROWS, COLS = 1000, 10_000  # 10 million elements, as in the peer comparison


def _base(rng: np.random.Generator, dims: tuple[int, ...], x_dtype: str) -> np.ndarray:
    return random_array(rng, shape(*dims), x_dtype, floats=(0.25, 4.0), ints=(-1000, 1000))


def _exponents(rng: np.random.Generator, dims: tuple[int, ...], y_dtype: str) -> np.ndarray:
    return random_array(rng, shape(*dims), y_dtype, floats=(-3.0, 3.0), ints=(0, 4))


def _is_int(name: str) -> bool:
    return dtype(name).kind in "iu"


#: The exponent classes: squares, cubes and other small integers, reciprocals, square roots and
#: their reciprocals, and a general exponent.
EXPONENTS = ["2", "3", "5", "-1", "0.5", "-0.5", "3.7"]


class PowScalarExponent:
    """x ** y with a 0-d y of each exponent class, for every dtype of X.

    The exponent has X's dtype for float X (as ONNX models carry it); for integer X an integral
    exponent is int64 and a fractional one float64 (integer X with a float y: the float64 result
    truncated).
    """

    params = (POW_X_DTYPES, EXPONENTS)
    param_names = ("dtype", "exponent")
    timeout = 300

    def setup(self, dtype_name, exponent):
        self.x = _base(np.random.default_rng(0), (ROWS, COLS), dtype_name)
        value = float(exponent)
        if not _is_int(dtype_name):
            self.y = np.asarray(value).astype(dtype(dtype_name))
        elif value.is_integer():
            self.y = np.asarray(int(value), np.int64)
        else:
            self.y = np.asarray(value, np.float64)
        self.out = pow(self.x, self.y)  # warm-up: compiles outside the timings

    def time_pow(self, dtype_name, exponent):
        pow(self.x, self.y)

    def track_gbps(self, dtype_name, exponent):
        """Memory throughput in GB/s: bytes read and written over the time."""
        moved = self.x.nbytes + self.out.nbytes
        return moved / seconds_per_call(lambda: pow(self.x, self.y)) / 1e9

    track_gbps.unit = "GB/s"


#: Broadcasting layouts (X and Y of X's dtype): the specializations (same shape, a row vector
#: along the inner dimension, a column, an outer product), the strided fallback (a transposed X),
#: and Pow-1's legacy broadcast with ``axis`` (the one opset whose code path differs).
LAYOUTS = [
    "same shape",
    "row (10000,)",
    "column (1000,1)",
    "outer (1000,1)^(1,10000)",
    "transposed X ^ row",
    "opset 1 broadcast=1 axis=0",
]


class PowBroadcast:
    """x ** y with an array y, in each broadcasting layout, for every dtype of X."""

    params = (POW_X_DTYPES, LAYOUTS)
    param_names = ("dtype", "layout")
    timeout = 300

    def setup(self, dtype_name, layout):
        rng = np.random.default_rng(0)
        self.kwargs = {}
        if layout == "same shape":
            x_dims, y_dims = (ROWS, COLS), (ROWS, COLS)
        elif layout == "row (10000,)":
            x_dims, y_dims = (ROWS, COLS), (COLS,)
        elif layout == "column (1000,1)":
            x_dims, y_dims = (ROWS, COLS), (ROWS, 1)
        elif layout == "outer (1000,1)^(1,10000)":
            x_dims, y_dims = (ROWS, 1), (1, COLS)
        elif layout == "transposed X ^ row":
            x_dims, y_dims = (COLS, ROWS), (COLS,)  # X.T below: (ROWS, COLS), Fortran order
        else:
            if dtype_name not in POW1_DTYPES:
                raise NotImplementedError(f"Pow-1 has no {dtype_name}")  # asv: skip
            x_dims, y_dims = (ROWS, COLS), (ROWS,)
            self.kwargs = {"opset": 1, "broadcast": 1, "axis": 0}
        self.x = _base(rng, x_dims, dtype_name)
        if layout == "transposed X ^ row":
            self.x = self.x.T
        self.y = _exponents(rng, y_dims, dtype_name)
        pow(self.x, self.y, **self.kwargs)

    def time_pow(self, dtype_name, layout):
        pow(self.x, self.y, **self.kwargs)


class PowTypes:
    """Every (X, Y) dtype pair Pow-15 allows, with a 0-d and with a same-shape exponent.

    A 0-d exponent is 3.7 for a float Y and 2 for an integer Y (so the peer comparison's
    bfloat16 ^ float32 3.7 and float32 ^ int64 2 are here); an array exponent is random (see the
    module docstring).
    """

    params = (POW_X_DTYPES, POW_Y_DTYPES, ["0-d", "same shape"])
    param_names = ("x_dtype", "y_dtype", "y")
    timeout = 300

    def setup(self, x_dtype, y_dtype, y):
        rng = np.random.default_rng(0)
        self.x = _base(rng, (ROWS, COLS), x_dtype)
        if y == "0-d":
            self.y = np.asarray(2 if _is_int(y_dtype) else 3.7).astype(dtype(y_dtype))
        else:
            self.y = _exponents(rng, (ROWS, COLS), y_dtype)
        pow(self.x, self.y)

    def time_pow(self, x_dtype, y_dtype, y):
        pow(self.x, self.y)


@njit(parallel=True)
def _parallel_copy(src, dst):
    for i in prange(src.size):
        dst[i] = src[i]


#: Half-type bases with a 0-d exponent: (X dtype, Y dtype, exponent).  All but x ** 0.5 map
#: the base's bits through a cached table of the 65,536 results; 0.5 keeps its vectorized
#: square root.
HALF_CASES = [
    "float16 ^ float16 3.7",
    "float16 ^ float16 -1.5",
    "float16 ^ float16 0.5",
    "bfloat16 ^ float32 3.7",
    "bfloat16 ^ bfloat16 0.75",
]


# The table's crossovers (``tuning.TABLE_USE_MIN``, ``TABLE_BUILD_MIN``): a cached table and
# the direct kernel measured equal at 256 elements, the table ahead from about 1K; building one
# costs the direct kernel over 65,536 elements.  Squares, square roots and reciprocals stay
# direct: on 10M float16, CPU time on 2 threads, x ** 2 1.2 ms against 3.0 ms through a table.
class PowHalfTable:
    """Half-type x ** y with a 0-d exponent, next to a parallel copy of the same bytes (the
    floor a table gather can approach)."""

    params = (HALF_CASES,)
    param_names = ("case",)
    timeout = 300

    def setup(self, case):
        x_dtype, _, y_dtype, value = case.split()
        self.x = _base(np.random.default_rng(0), (ROWS, COLS), x_dtype)
        self.y = np.asarray(float(value)).astype(dtype(y_dtype))
        self.out = pow(self.x, self.y)  # warm-up: compiles, and builds the table
        self.bits = self.x.view(np.uint16).reshape(-1)
        self.copy = np.empty_like(self.bits)
        _parallel_copy(self.bits, self.copy)

    def time_pow(self, case):
        pow(self.x, self.y)

    def time_pow_out(self, case):
        pow(self.x, self.y, out=self.out)

    def time_parallel_copy(self, case):
        _parallel_copy(self.bits, self.copy)


class PowOneThread:
    """Float x ** 3.7 and x ** y (same shape) on one thread, as a dask task runs it; numpy's
    ``power`` (Intel SVML on AVX-512 machines) is the same-thread peer."""

    params = (["float32", "float64"], ["3.7", "same shape"])
    param_names = ("dtype", "exponent")
    timeout = 300

    def setup(self, dtype_name, exponent):
        rng = np.random.default_rng(0)
        self.x = _base(rng, (ROWS, COLS), dtype_name)
        if exponent == "same shape":
            self.y = _exponents(rng, (ROWS, COLS), dtype_name)
        else:
            self.y = np.asarray(float(exponent), dtype(dtype_name))
        pow(self.x, self.y)

    def time_pow(self, dtype_name, exponent):
        threads = numba.get_num_threads()  # restored: tests run every class in one process
        numba.set_num_threads(1)
        try:
            pow(self.x, self.y)
        finally:
            numba.set_num_threads(threads)

    def time_numpy(self, dtype_name, exponent):
        np.power(self.x, self.y)


class PowBaseDistribution:
    """Float x ** 3.7 over bases near 1, over magnitudes 2**-30..2**30, and over [-4, 4) (half
    negative: NaN results), next to the default [0.25, 4): the spread of our own times."""

    params = (["float32", "float64"], ["0.25..4", "near 1", "wide", "negative"])
    param_names = ("dtype", "bases")
    timeout = 300

    def setup(self, dtype_name, bases):
        rng = np.random.default_rng(0)
        n = int(np.prod(shape(ROWS, COLS)))
        values = {
            "0.25..4": lambda: rng.uniform(0.25, 4.0, n),
            "near 1": lambda: rng.uniform(0.9, 1.1, n),
            "wide": lambda: np.exp2(rng.uniform(-30.0, 30.0, n)),
            "negative": lambda: rng.uniform(-4.0, 4.0, n),
        }[bases]()
        self.x = values.astype(dtype(dtype_name))
        self.y = np.asarray(3.7, dtype(dtype_name))
        pow(self.x, self.y)

    def time_pow(self, dtype_name, bases):
        pow(self.x, self.y)


class PowSmall:
    """x ** y on 16 elements: the cost of the front layer (checks, dispatch, allocation) and of
    a kernel launch, with a Python exponent (as a numpy user writes it) or a same-shape array."""

    params = (POW_X_DTYPES, ["python 3.7", "python 3", "same shape"])
    param_names = ("dtype", "exponent")

    def setup(self, dtype_name, exponent):
        rng = np.random.default_rng(0)
        self.x = _base(rng, (16,), dtype_name)
        if exponent == "same shape":
            self.y = _exponents(rng, (16,), dtype_name)
        else:
            self.y = float(exponent.split()[1]) if "." in exponent else int(exponent.split()[1])
        pow(self.x, self.y)

    def time_pow(self, dtype_name, exponent):
        pow(self.x, self.y)
