"""The decorators of the kernels and of the helpers compiled into them, and the stamp that keeps
numba's on-disk cache from serving a kernel compiled from older sources of any module it reads."""

from __future__ import annotations

import functools
import hashlib
import sys
import threading
import types
from pathlib import Path

import numba
from numba.extending import overload

from .numba_private import (
    KERNEL_OPTIONS,
    LINK_ONLY_OPTIONS,
    check_cache_loads,
    link_only_jit,
    stamp_cache_index,
)
from .schedule import no_call_state, no_chunksize, no_spread

#: The modules kernels read while they compile, named within the package: those that define
#: kernels and every package module they import, directly or through others (the helpers
#: compiled into the kernels, the constants and CPU decisions read at compile time, the compiler
#: pipeline).  A list rather than a walk of the modules' imports at run time: that walk parses
#: all of them on every import of the package, which would then take about a seventh longer;
#: tests/test_cache_stamp.py derives this set from the imports instead, and fails on a module
#: missing here (its edits would be served stale) or listed needlessly (its edits would
#: invalidate every cached kernel for nothing).
KERNEL_SOURCES = (
    "ops.matmul.kernels",
    "ops.matmul.microkernel",
    "ops.pow.ints",
    "ops.pow.kernels",
    "ops.pow.powmath",
    "ops.pow.streaming",
    "runtime.convert",
    "runtime.cpu",
    "runtime.half",
    "runtime.jit",
    "runtime.numba_private",
    "runtime.pool",
    "runtime.schedule",
    "runtime.stack",
    "runtime.vectors",
    "tuning",
)

# The folder of the top-level package, wherever in it this module sits.
_ROOT = Path(sys.modules[__name__.partition(".")[0]].__file__).parent


def stamp_sources(root: Path) -> bytes | None:
    """SHA-256 of the sources of :data:`KERNEL_SOURCES` in the package folder ``root``, or
    ``None`` where one cannot be read (a module shipped as bytecode only, or moved without this
    list following it)."""
    digest = hashlib.sha256()
    for name in KERNEL_SOURCES:
        path = root.joinpath(*name.split("."))
        try:
            try:
                source = path.with_suffix(".py").read_bytes()
            except FileNotFoundError:  # a package
                source = path.joinpath("__init__.py").read_bytes()
        except OSError:
            return None
        digest.update(f"{name} {len(source)}\n".encode())
        digest.update(source)
    return digest.digest()


@functools.cache
def sources_stamp() -> bytes | None:
    """:func:`stamp_sources` of this package, read once per process."""
    return stamp_sources(_ROOT)


def kernel(*, slp: bool = False, **options):
    """``numba.njit(cache=True, nogil=True, **options)``, or uncached where no cache can live.

    ``slp=True``: the kernel needs LLVM's SLP vectorizer, which numba leaves off, to turn its
    straight-line register blocks into vector code; ``parallel.launch`` compiles it with it
    (``numba_private.compile_with_slp``) on its first launch for each dtype.  Every argument
    type of such a kernel must follow from the dtype of its first argument, so one signature
    per dtype is all that is compiled.

    numba picks the cache directory when the function is decorated, at import: next to the
    source if writable, else the user-wide cache (``NUMBA_CACHE_DIR`` overrides both).  When
    none is writable (read-only site-packages and no writable home), numba raises; the kernels
    then compile in memory on first use, as they would without a cache.

    numba validates a cached kernel against the one file that defines it, so an edit of an
    inlined helper in another module (``powmath.py`` say) would load stale machine code; the
    index stamp here also covers every module in :data:`KERNEL_SOURCES`.  Where one of them
    cannot be read, or numba keeps that stamp elsewhere than the versions this was checked on,
    the kernels are not cached.

    Several processes may fill one cache at once (test workers, a pool of servers): a kernel
    takes from the cache only machine code compiled for the argument types it is called with
    (``numba_private.check_cache_loads``).
    """

    jit_options = {"nogil": True, **KERNEL_OPTIONS, **options}

    def decorate(func):
        dispatcher = _cached_or_not(func, jit_options)
        dispatcher.slp = slp
        dispatcher.jit_options = jit_options
        return dispatcher

    return decorate


_twins: dict = {}
_twin_lock = threading.Lock()


def serial_twin(kernel):
    """The kernel compiled for the calling thread alone: the same source without
    ``parallel=True`` (its ``prange`` a plain loop), built on first use and cached on disk
    apart from the kernel (under its own name, ``<name>_here``: numba files a function's
    compiled code by its name, not by its options).  In the twin the kernel's own calls of
    ``call_state``, ``spread`` and ``set_chunksize`` (``runtime.schedule``) do nothing: there is
    no pool to spread over or balance, and their code would refer to the threading layer's
    functions, which a twin loaded from the cache before the layer starts cannot reach (a
    crash, seen).  Same arithmetic, same results."""
    return twin_of(kernel, "_here", _own_source)


def _own_source(kernel):
    return kernel.py_func


def twin_of(kernel, suffix: str, source):
    """``kernel``'s twin of the kind ``suffix`` (``_here``: ``serial_twin``; ``_tasks``: the
    own pool's, ``runtime.pool.tasks_of``): ``compile_twin(kernel, source(kernel), suffix)``,
    made once per process, whichever thread asks first."""
    twin = _twins.get((kernel, suffix))
    if twin is None:
        with _twin_lock:
            twin = _twins.get((kernel, suffix))
            if twin is None:
                twin = _twins[kernel, suffix] = compile_twin(kernel, source(kernel), suffix)
    return twin


def twins(suffix: str) -> list:
    """The twins of the kind ``suffix`` made so far."""
    return [twin for (_, kind), twin in list(_twins.items()) if kind == suffix]


def serial_twins() -> list:
    """The serial twins made so far."""
    return twins("_here")


def compile_twin(kernel, func, suffix: str):
    """``func`` (``kernel``'s Python function, or one made from its source) compiled with the
    kernel's options but ``parallel``, under the kernel's name with ``suffix``, the schedule's
    helpers (``call_state``, ``spread``, ``set_chunksize``) doing nothing."""
    names = dict(
        func.__globals__, call_state=no_call_state, set_chunksize=no_chunksize, spread=no_spread
    )
    name = kernel.py_func.__name__ + suffix
    twin = types.FunctionType(func.__code__, names, name, func.__defaults__, func.__closure__)
    twin.__qualname__ = kernel.py_func.__qualname__ + suffix
    twin.__module__ = kernel.py_func.__module__
    twin.__doc__ = kernel.py_func.__doc__
    options = {k: v for k, v in kernel.jit_options.items() if k != "parallel"}
    dispatcher = _cached_or_not(twin, options)
    dispatcher.slp = kernel.slp
    dispatcher.jit_options = options
    return dispatcher


def _cached_or_not(func, jit_options):
    stamp = sources_stamp()
    if stamp is not None:
        try:
            dispatcher = numba.njit(cache=True, **jit_options)(func)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            pass
        else:
            if stamp_cache_index(dispatcher, stamp) and check_cache_loads(dispatcher):
                return dispatcher
    return numba.njit(**jit_options)(func)


def helper(**options):
    """``numba.njit(**options)`` for a function that only kernels call: compiled to an LLVM
    module the kernels link and inline, without the Python entry point, wrappers and machine code
    of its own that numba would otherwise build for it on every kernel's first compile (see
    ``runtime.numba_private``).  Calling it from Python raises ``TypeError``."""
    return link_only_jit(**options)


def helper_overload(func, inline="never", **jit_options):
    """``numba.extending.overload`` whose implementations are compiled as :func:`helper` s."""
    return overload(func, inline=inline, jit_options={**LINK_ONLY_OPTIONS, **jit_options})
