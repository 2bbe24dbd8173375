"""First-call latency in a fresh process: the call that compiles a kernel, and the import.

``timeraw_*`` benchmarks run their code in a new interpreter: the setup part (imports, inputs)
is not timed, the statement (the first call) is.  ``cache="cold"`` points numba's on-disk cache at
an empty folder, so the call compiles; ``cache="warm"`` fills the default cache first (in another
process), so the call loads the compiled kernel: what every run after the first sees.
"""

from __future__ import annotations

import subprocess
import sys

from . import common

_IMPORTS = """
import ml_dtypes
import numpy as np
from numba_onnx_ops import matmul, pow
"""

_COLD_CACHE = """
import atexit, os, shutil, tempfile
_cache = tempfile.mkdtemp(prefix="numba-cache-")
atexit.register(shutil.rmtree, _cache, True)
os.environ["NUMBA_CACHE_DIR"] = _cache  # read when numba is imported, just below
"""

#: One first call per kernel family, and two from a user's ``@njit`` function: (inputs, the
#: call).  float32 2-D products run on the micro-kernel, on the pool from a few hundred thousand
#: multiply-adds and on the calling thread below (its serial twin, compiled apart); long batches
#: of tiny matrices on their own kernel.
FIRST_CALLS = {
    "matmul float32 (256,256)": ("a = np.ones((256, 256), np.float32)", "matmul(a, a)"),
    "matmul float32 (64,64)": ("a = np.ones((64, 64), np.float32)", "matmul(a, a)"),
    "matmul float32 (1024,40,30)@(30,20)": (
        "a = np.ones((1024, 40, 30), np.float32); b = np.ones((30, 20), np.float32)",
        "matmul(a, b)",
    ),
    "matmul int32 (64,64)": ("a = np.ones((64, 64), np.int32)", "matmul(a, a)"),
    "matmul int32 (64,8192)@(8192,64)": (  # K past the direct kernel's: the packed one
        "a = np.ones((64, 8192), np.int32); b = np.ones((8192, 64), np.int32)",
        "matmul(a, b)",
    ),
    "matmul float16 (64,64)": ("a = np.ones((64, 64), np.float16)", "matmul(a, a)"),
    "matmul bfloat16 (64,64)": ("a = np.ones((64, 64), ml_dtypes.bfloat16)", "matmul(a, a)"),
    "matmul float32 (4096,8,8)": ("a = np.ones((4096, 8, 8), np.float32)", "matmul(a, a)"),
    "matmul float32 (2048,16,16)": ("a = np.ones((2048, 16, 16), np.float32)", "matmul(a, a)"),
    "matmul float32 (1024,16,16)@(16,)": (
        "a = np.ones((1024, 16, 16), np.float32); v = np.ones(16, np.float32)",
        "matmul(a, v)",
    ),
    "pow float32 ^ 2": ("x = np.ones(1000, np.float32); y = np.float32(2)", "pow(x, y)"),
    "pow float32 ^ 3.7": ("x = np.ones(1000, np.float32); y = np.float32(3.7)", "pow(x, y)"),
    "pow float32 ^ array": ("x = np.ones(1000, np.float32); y = x.copy()", "pow(x, y)"),
    "pow float64 ^ 3.7": ("x = np.ones(1000); y = np.float64(3.7)", "pow(x, y)"),
    "pow int32 ^ 3": ("x = np.ones(1000, np.int32); y = np.int32(3)", "pow(x, y)"),
    "pow float16 ^ 2": ("x = np.ones(1000, np.float16); y = np.float16(2)", "pow(x, y)"),
    "pow float16 ^ float16": ("x = np.ones(1000, np.float16); y = x.copy()", "pow(x, y)"),
    # a user's @njit function: the overloads' code compiled into it, the kernels it calls
    "njit pow float32 ^ 3.7": (
        "import numba; f = numba.njit(lambda x: pow(x, 3.7)); x = np.ones(1000, np.float32)",
        "f(x)",
    ),
    "njit matmul float32 (8,8)": (
        "import numba; f = numba.njit(lambda a: matmul(a, a)); a = np.ones((8, 8), np.float32)",
        "f(a)",
    ),
}


class Compile:
    """Seconds of the first call in a fresh process (compiling, or loading from numba's cache)."""

    params = (list(FIRST_CALLS), ["cold", "warm"])
    param_names = ("first call", "cache")
    number = 1  # only the first call compiles
    repeat = (1, 3, 30.0)
    warmup_time = 0
    timeout = 600

    def setup(self, first_call, cache):
        if cache == "warm" and not common.TINY:
            inputs, call = FIRST_CALLS[first_call]
            subprocess.run([sys.executable, "-c", f"{_IMPORTS}\n{inputs}\n{call}"], check=True)

    def timeraw_first_call(self, first_call, cache):
        inputs, call = FIRST_CALLS[first_call]
        setup = (_COLD_CACHE if cache == "cold" else "") + _IMPORTS + inputs
        return call, setup


class Import:
    """Seconds to import the package in a fresh process: nothing should compile at import."""

    number = 1
    repeat = (1, 5, 20.0)
    warmup_time = 0

    def timeraw_import(self):
        return "import numba_onnx_ops"
