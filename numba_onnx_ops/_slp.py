"""Launching a kernel compiled with LLVM's SLP vectorizer, which numba leaves off by default."""

from __future__ import annotations

import threading

import numpy as np
from numba.core import config as _numba_config
from numba.core.compiler_lock import global_compiler_lock

from ._parallel import launch

_SLP_LOCK = threading.Lock()
_SLP_BUILT: set = set()


def launch_slp(kernel, dtype: np.dtype, *args):
    """Launch ``kernel``, compiling it first with LLVM's SLP vectorizer for these types.

    numba turns SLP off by default (``NUMBA_SLP_VECTORIZE``); the register-blocked MatMul
    kernels need it to turn their straight-line blocks into vector code.  The flag is set only
    while this one signature compiles, under numba's compiler lock, so no other compilation
    sees it.  ``dtype`` (the operands' dtype) must fix every argument type of ``kernel``: one
    signature per dtype is compiled here, and a second argument type would be compiled outside
    this function, without SLP.
    """
    key = (kernel, dtype)
    if key not in _SLP_BUILT:
        with _SLP_LOCK, global_compiler_lock:
            if key not in _SLP_BUILT:
                sig = tuple(kernel.typeof_pyval(x) for x in args)
                # numba re-reads NUMBA_* variables at each compilation when they changed since
                # it last looked, which would reset the flag set below: let it look first.
                _numba_config.reload_config()
                saved = _numba_config.SLP_VECTORIZE
                _numba_config.SLP_VECTORIZE = 1
                try:
                    kernel.compile(sig)
                finally:
                    _numba_config.SLP_VECTORIZE = saved
                _SLP_BUILT.add(key)
    return launch(kernel, *args)
