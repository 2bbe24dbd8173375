"""The decorators of the kernels, and of the helpers compiled into them."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numba
from numba.extending import overload

from .numba_private import KERNEL_OPTIONS, LINK_ONLY_OPTIONS, link_only_jit, stamp_cache_index

_PACKAGE = Path(__file__).resolve().parent.parent


@functools.cache
def sources_stamp() -> bytes:
    """SHA-256 of every source file a kernel's machine code can depend on: the kernel modules
    and the helpers they inline (``powmath``, ``half``, ``convert``, ...), and ``_dtypes``
    (empty if they cannot be read as files, where numba cannot cache anyway)."""
    digest = hashlib.sha256()
    try:
        for path in sorted(
            p for d in ("core", "ops", "runtime") for p in _PACKAGE.joinpath(d).rglob("*.py")
        ):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    except OSError:
        return b""
    return digest.digest()


def kernel(**options):
    """``numba.njit(cache=True, nogil=True, **options)``, or uncached where no cache can live.

    numba picks the cache directory when the function is decorated, at import: next to the
    source if writable, else the user-wide cache (``NUMBA_CACHE_DIR`` overrides both).  When
    none is writable (read-only site-packages and no writable home), numba raises; the kernels
    then compile in memory on first use, as they would without a cache.

    numba validates a cached kernel against the hash of the one file that defines it, so an
    edit of an inlined helper in another module (``powmath.py`` say) would load stale machine
    code; the index stamp here also covers every file in ``sources_stamp``.  Where numba keeps
    that stamp elsewhere than the versions this was checked on, the kernels are not cached.
    """

    jit_options = {"nogil": True, **KERNEL_OPTIONS, **options}

    def decorate(func):
        try:
            dispatcher = numba.njit(cache=True, **jit_options)(func)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return numba.njit(**jit_options)(func)
        if not stamp_cache_index(dispatcher, sources_stamp()):
            return numba.njit(**jit_options)(func)
        return dispatcher

    return decorate


def helper(**options):
    """``numba.njit(**options)`` for a function that only kernels call: compiled to an LLVM
    module the kernels link and inline, without the Python entry point, wrappers and machine code
    of its own that numba would otherwise build for it on every kernel's first compile (see
    ``_numba_private``).  Calling it from Python raises ``TypeError``."""
    return link_only_jit(**options)


def helper_overload(func, inline="never", **jit_options):
    """``numba.extending.overload`` whose implementations are compiled as :func:`helper` s."""
    return overload(func, inline=inline, jit_options={**LINK_ONLY_OPTIONS, **jit_options})
