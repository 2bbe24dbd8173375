"""The CPU features numba compiles for, read once, on first need (not at import)."""

from __future__ import annotations

import functools

import numba
from llvmlite import binding as _llvm


@functools.cache
def cpu_features() -> frozenset[str]:
    """The features numba compiles for: the host CPU's, or those it is told to
    (``NUMBA_CPU_NAME`` with ``NUMBA_CPU_FEATURES``; a CPU name alone gives none)."""
    if numba.config.CPU_NAME in (None, "host"):
        return frozenset(k for k, v in _llvm.get_host_cpu_features().items() if v)
    given = (numba.config.CPU_FEATURES or "").split(",")
    return frozenset(f[1:] for f in given if f.startswith("+"))


def vector_bits() -> int:
    """Width of the vector registers kernels written as LLVM vector code are built for: 512
    with AVX-512F, 256 with AVX2 and FMA, 0 otherwise (those kernels are then not used)."""
    features = cpu_features()
    if "avx512f" in features:
        return 512
    if "avx2" in features and "fma" in features:
        return 256
    return 0
