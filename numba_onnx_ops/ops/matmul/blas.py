"""numpy's BLAS as the MatMul paths use it: which layouts numpy hands to it, and the one name
every path calls it by (so a test can watch every BLAS call in one place)."""

from __future__ import annotations

import numpy as np

matmul = np.matmul


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
