"""The one decorator every kernel uses."""

from __future__ import annotations

import numba


def kernel(**options):
    """``numba.njit(cache=True, nogil=True, **options)``, or uncached where no cache can live.

    numba picks the cache directory when the function is decorated, at import: next to the
    source if writable, else the user-wide cache (``NUMBA_CACHE_DIR`` overrides both).  When
    none is writable (read-only site-packages and no writable home), numba raises; the kernels
    then compile in memory on first use, as they would without a cache.
    """

    def decorate(func):
        try:
            return numba.njit(cache=True, nogil=True, **options)(func)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return numba.njit(nogil=True, **options)(func)

    return decorate
