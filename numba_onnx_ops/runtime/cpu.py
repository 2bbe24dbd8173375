"""The CPU features numba compiles for, read once, on first need (not at import)."""

from __future__ import annotations

import functools
import glob

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


def cpu_name() -> str:
    """The CPU model numba compiles for, in LLVM's names (``znver4``, ``sapphirerapids``, ...):
    the host's, or ``NUMBA_CPU_NAME``."""
    if numba.config.CPU_NAME in (None, "host"):
        return _llvm.get_host_cpu_name()
    return numba.config.CPU_NAME


@functools.cache
def amd_zen() -> bool:
    """Whether numba compiles for one of AMD's Zen cores, where some kernels choose differently
    (``ops.matmul.bf16_pairs.pairs_fast``, the Pow kernels' prefetch; the measurements:
    docs/design.md)."""
    return cpu_name().startswith("znver")


@functools.cache
def fma512_halved() -> bool:
    """Whether numba compiles for AMD's Zen 4 (``znver4``), whose FMA units are 256 bits wide:
    a 512-bit FMA issues as two halves, one per cycle, half the rate of its successor Zen 5 and
    of Intel's AVX-512 server cores (two per cycle).  The micro-kernel's register blocks follow
    the rate (``ops.matmul.own``)."""
    return cpu_name() == "znver4"


def vector_bits() -> int:
    """Width of the vector registers kernels written as LLVM vector code are built for: 512
    with AVX-512F, 256 with AVX2 and FMA, 0 otherwise (those kernels are then not used)."""
    features = cpu_features()
    if "avx512f" in features:
        return 512
    if "avx2" in features and "fma" in features:
        return 256
    return 0


_DEFAULT_CACHE_BYTES = 32 * 2**20
_CACHES = "/sys/devices/system/cpu/cpu0/cache"
_SIZE_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}  # the suffixes of its ``size`` files


@functools.cache
def last_level_cache_bytes() -> int:
    """Size of the largest data cache of the first CPU as Linux lists it (the L3 on x86-64),
    or 32 MiB where there is no such list."""
    sizes = []
    for entry in glob.glob(f"{_CACHES}/index*"):
        try:
            with open(f"{entry}/type") as f:
                kind = f.read().strip()
            with open(f"{entry}/size") as f:
                text = f.read().strip()
        except OSError:
            continue
        if kind != "Instruction" and text[:-1].isdigit() and text[-1] in _SIZE_UNITS:
            sizes.append(int(text[:-1]) * _SIZE_UNITS[text[-1]])
    return max(sizes, default=_DEFAULT_CACHE_BYTES)
