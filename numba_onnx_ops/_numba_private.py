"""Every use of numba internals that are not public API, each with its fallback.

Checked against the sources of numba 0.60.0 and 0.68.1 (the oldest and newest versions this
package was tried with); the attributes below exist and behave as described in both.

- ``Dispatcher._cache._cache_file`` (a ``numba.core.caching.IndexDataCacheFile``) and its
  ``_source_stamp``: the index of a cached kernel is saved with this stamp and ignored when the
  stamp read back differs (``_load_index``).  :func:`stamp_cache_index` widens it to every file a
  kernel inlines.  Without it numba would check only the kernel's own file and could load stale
  machine code after an edit or upgrade of an inlined helper, so where the attributes are missing
  the kernels are compiled without the on-disk cache (slower first calls, never stale code).
- ``numba.core.config.reload_config``, ``numba.core.config.SLP_VECTORIZE`` and
  ``numba.core.compiler_lock.global_compiler_lock``: :func:`compile_with_slp` turns LLVM's SLP
  vectorizer on for one compilation.  Where they are missing, the kernel compiles without SLP:
  the same results, slower small products.
- ``numba.core.cgutils`` (``_kernels/stack.py``): the helpers numba's low-level extension examples
  use for code generation; an import error there names the module.
- The C symbol ``set_parallel_chunksize`` (``_kernels/schedule.py``): the function behind
  ``numba.set_parallel_chunksize``, which numba registers with LLVM when it starts its threading
  layer and which its own parfor code calls by that name.  A kernel calls it the same way, since
  the public function, called from a kernel, goes through a ctypes pointer that numba's on-disk
  cache refuses.
- The C symbols ``get_thread_id`` and ``get_num_threads`` (``_kernels/schedule.py``): the
  functions numba's own ``numba.get_thread_id()`` and internal ``_iget_num_threads`` compile to,
  registered by the same start of the threading layer (which ``spread`` forces at compile time
  through the public ``numba.get_num_threads()``).

The threading layer is read through the public ``numba.threading_layer()`` (see ``_parallel``).
"""

from __future__ import annotations

import warnings

import numba

CHECKED_ON = ("0.60.0", "0.68.1")

try:
    from numba.core import config as _config
    from numba.core.compiler_lock import global_compiler_lock as _compiler_lock

    _HAVE_SLP_SWITCH = hasattr(_config, "reload_config") and hasattr(_config, "SLP_VECTORIZE")
except ImportError:
    _HAVE_SLP_SWITCH = False

_cache_warned = False


def stamp_cache_index(dispatcher, stamp: bytes) -> bool:
    """Add ``stamp`` to the freshness stamp of ``dispatcher``'s on-disk cache index.

    Returns ``False`` (after one warning per process) when this numba keeps the stamp elsewhere:
    the caller must then not use the on-disk cache.
    """
    try:
        index = dispatcher._cache._cache_file
        own = index._source_stamp
        callable(index._load_index)  # the method that compares the stamp read back
    except AttributeError:
        _warn_uncached()
        return False
    index._source_stamp = (own, stamp)
    return True


def _warn_uncached() -> None:
    global _cache_warned
    if not _cache_warned:
        _cache_warned = True
        warnings.warn(
            f"numba_onnx_ops: numba {numba.__version__} stores its cache index differently from "
            f"the versions this package was checked on ({', '.join(CHECKED_ON)}); its kernels "
            "compile without the on-disk cache (slower first calls, same results)",
            RuntimeWarning,
            stacklevel=3,
        )


def compile_with_slp(kernel, sig: tuple) -> None:
    """Compile ``kernel`` for ``sig`` with LLVM's SLP vectorizer, which numba turns off by default
    (``NUMBA_SLP_VECTORIZE``); without numba's switch for it, compile as numba would."""
    if not _HAVE_SLP_SWITCH:
        kernel.compile(sig)
        return
    # The flag is set only while this one signature compiles, under numba's compiler lock, so no
    # other compilation sees it.
    with _compiler_lock:
        # numba re-reads NUMBA_* variables at each compilation when they changed since it last
        # looked, which would reset the flag set below: let it look first.
        _config.reload_config()
        saved = _config.SLP_VECTORIZE
        _config.SLP_VECTORIZE = 1
        try:
            kernel.compile(sig)
        finally:
            _config.SLP_VECTORIZE = saved
