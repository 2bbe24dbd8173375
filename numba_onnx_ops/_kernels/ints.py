"""Integer ``min`` and ``max`` for the kernels.

numba (from 0.61 on) implements the builtins ``min`` and ``max`` as functions that it compiles
for each combination of argument types on first use in a process, each with a Python wrapper
and machine code of its own: 0.16 s of the first float16 Pow kernel's compile.  These two are
inlined into their caller's IR instead.  Integers only: the builtins' NaN rules stay with them.
"""

from __future__ import annotations

from numba import njit


@njit(inline="always")
def int_min(a, b):
    """The smaller of two integers."""
    return a if a < b else b


@njit(inline="always")
def int_max(a, b):
    """The larger of two integers."""
    return a if a > b else b
