"""Launching a kernel compiled with LLVM's SLP vectorizer, which numba leaves off by default."""

from __future__ import annotations

import threading

import numpy as np

from .numba_private import compile_with_slp
from .parallel import launch

_SLP_LOCK = threading.Lock()
_SLP_BUILT: set = set()


def launch_slp(kernel, dtype: np.dtype, *args):
    """Launch ``kernel``, compiling it first with LLVM's SLP vectorizer for these types.

    numba turns SLP off by default (``NUMBA_SLP_VECTORIZE``); the register-blocked MatMul
    kernels need it to turn their straight-line blocks into vector code (see
    ``_numba_private.compile_with_slp``).  ``dtype`` (the operands' dtype) must fix every
    argument type of ``kernel``: one signature per dtype is compiled here, and a second argument
    type would be compiled outside this function, without SLP.
    """
    key = (kernel, dtype)
    if key not in _SLP_BUILT:
        with _SLP_LOCK:
            if key not in _SLP_BUILT:
                compile_with_slp(kernel, tuple(kernel.typeof_pyval(x) for x in args))
                _SLP_BUILT.add(key)
    return launch(kernel, *args)
