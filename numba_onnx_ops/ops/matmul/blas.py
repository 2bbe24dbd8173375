"""numpy's BLAS as the MatMul paths use it: which layouts numpy hands to it, and the one name
every path calls it by (so a test can watch every BLAS call in one place), with numpy's
floating-point error reports turned off."""

from __future__ import annotations

import contextvars
import threading

import numpy as np


def _quiet_context() -> contextvars.Context:
    """A copy of the current context with numpy's floating-point errors ignored."""
    with np.errstate(all="ignore"):
        return contextvars.copy_context()


# ``matmul`` is numpy.matmul with its floating-point errors ignored: overflow gives inf and
# invalid operations NaN with neither a RuntimeWarning nor a FloatingPointError, whatever the
# caller's errstate, as the own kernels and onnxruntime do, so what a product reports does not
# depend on whether its shape and dtype send it to BLAS.  Entering ``np.errstate`` costs about
# as much as a small numpy.matmul (docs/design.md), so where numpy keeps its error state in a
# context variable (numpy 2; checked here, not assumed) each thread runs numpy.matmul in a
# context of its own that holds "ignore" (a context is entered by one thread at a time, and
# nothing inside numpy.matmul on ndarrays runs Python code that could enter it again).
# Elsewhere (numpy 1: per-thread state) every call enters a new errstate.
_contexts = threading.local()
_numpy_matmul = np.matmul

if _quiet_context().run(np.geterr)["invalid"] == "ignore":

    def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        try:
            run = _contexts.run
        except AttributeError:
            run = _contexts.run = _quiet_context().run
        if out is None:  # (not passed on: a keyword costs numpy time to parse)
            return run(_numpy_matmul, a, b)
        return run(_numpy_matmul, a, b, out=out)

else:

    def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        with np.errstate(all="ignore"):
            return _numpy_matmul(a, b, out=out)


def blasable(x: np.ndarray) -> bool:
    """Whether numpy.matmul hands these matrices to BLAS rather than to its plain loop: one
    axis of unit stride, the other a whole number of elements at least as long as the first
    axis (numpy's ``is_blasable2d``, either way round); a vector needs a positive stride."""
    item = x.itemsize
    r, c = x.shape[-2:]
    s0, s1 = x.strides[-2:]
    if r == 1 or c == 1:
        s = s1 if r == 1 else s0
        return c == r == 1 or (s > 0 and s % item == 0)
    if s1 == item:
        return s0 % item == 0 and s0 >= c * item
    return s0 == item and s1 % item == 0 and s1 >= r * item
