"""Kernel launches, the one door to every kernel: the threading-layer policy that makes them
safe from threads and forked children, and the SLP builds of the kernels that need them.

numba's threading layers differ (numba docs, "Selecting a threading layer"):

- ``tbb``: safe from many threads and after ``fork``.  Preferred.
- ``omp`` (GNU OpenMP on Linux): safe from many threads, but a child made by ``fork`` after the
  parent ran a parallel region is killed at its first one.
- ``workqueue``: safe after ``fork``, but two threads launching at once abort the process.

Policy: at import, if numba has not chosen a layer yet and the user has not named one, load
the ``tbb`` package's ``libtbb`` (a dependency of this package) into the process so numba's own
default order (tbb, omp, workqueue) finds it; numba's settings are left untouched, so the user's
other numba code sees the same choice numba would make with TBB on the loader's path.  Whatever
layer is in force, ``launch`` then makes calls safe: under ``workqueue`` launches are
serialized by a lock; under ``omp`` a forked child runs serial twins of the kernels
(``jit.serial_twin``).  Kernels compiled without ``parallel=True`` run through ``here``, under
any layer.
"""

from __future__ import annotations

import ctypes
import os
import threading
from importlib import metadata

import numba

from . import pool
from .jit import serial_twin
from .numba_private import compile_with_slp, compiled_address, entry_point, threads_now

_lock = threading.Lock()
_forked_after_start = False  # this process is a fork of one whose layer had started
_slp_built: set = set()  # (kernel, dtype of its first argument) compiled with SLP


def _libtbb_path() -> str | None:
    """The ``tbb`` distribution's shared library, if it is installed."""
    try:
        files = metadata.files("tbb") or []
    except metadata.PackageNotFoundError:
        return None
    names = ("libtbb.so.12", "libtbb.12.dylib", "tbb12.dll")
    for f in files:
        if f.name in names:
            path = str(f.locate())
            if os.path.exists(path):
                return path
    return None


def prefer_tbb() -> None:
    """Load libtbb before numba picks a layer, unless the user or numba already chose."""
    if threading_layer() is not None or str(numba.config.THREADING_LAYER).lower() != "default":
        return
    path = _libtbb_path()
    if path is None:
        return
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError:  # a broken install: numba falls back to omp/workqueue, launch() copes
        pass


def threading_layer() -> str | None:
    """The layer numba runs parallel kernels on, or ``None`` before the first launch."""
    try:
        return numba.threading_layer()
    except ValueError:
        return None


def launch(kernel, *args):
    """Call a kernel (``jit.kernel``) in the way the active threading layer allows: the one
    place every kernel call goes through.  A kernel marked ``slp`` is compiled first, with
    LLVM's SLP vectorizer, for the dtype of its first argument.

    Where the calling thread runs parallel loops on one thread (``numba.set_num_threads(1)``,
    a dask task's thread), the kernel's serial twin runs instead: the same tasks in the same
    order, so the same results, without the pool's launch, whose scheduling made the same work
    slower on one thread (measured: docs/design.md, "One thread")."""
    layer = threading_layer()
    if layer is None:
        if kernel.slp and (kernel, args[0].dtype) not in _slp_built:
            _build_with_slp(kernel, args)
        with _lock:  # the first launch picks the layer; two threads must not race it
            if threading_layer() is None:
                return kernel(*args)
        layer = threading_layer()
    if threads_now() == 1:
        return here(serial_twin(kernel), *args)
    if kernel.slp and (kernel, args[0].dtype) not in _slp_built:
        _build_with_slp(kernel, args)
    if layer == "tbb":
        return kernel(*args)
    if layer == "omp":
        if _forked_after_start:
            return here(serial_twin(kernel), *args)
        return kernel(*args)
    with _lock:  # workqueue (or unknown): one parallel launch at a time
        return kernel(*args)


def pool_entry(kernel, *args):
    """What ``launch`` calls for ``kernel`` with arguments of exactly the types of ``args``, on
    a pool of more than one thread, where the threading layer lets a call go straight to the
    kernel: its compiled entry (``numba_private.entry_point``), SLP included, which skips
    ``launch``'s policy and the dispatcher's matching of the types, two fifths of a small
    launch's cost.  Under ``tbb``, the entry itself; under ``omp``, the entry behind the one
    check ``launch`` makes there, so that a process forked after the layer started runs the
    serial twin (libgomp's pool would abort it).  ``None`` under any other layer, or before
    the first launch has picked one: the caller launches.  The caller also checks
    ``numba_private.threads_now()`` on every call, as ``launch`` does: on one thread the
    serial twin runs instead."""
    layer = threading_layer()
    if layer not in ("tbb", "omp"):
        return None
    if kernel.slp and (kernel, args[0].dtype) not in _slp_built:
        _build_with_slp(kernel, args)
    entry = entry_point(kernel, args)
    if layer == "tbb":
        return entry
    twin = serial_twin(kernel)

    def unless_forked(*call):
        if _forked_after_start:
            return here(twin, *call)
        return entry(*call)

    return unless_forked


def pool_runner(kernel, args: tuple):
    """A function ``go(helpers, *args)`` that runs ``kernel`` on the own pool
    (``runtime.pool``): its task twin on the calling thread and on up to ``helpers`` workers
    (the calling thread's ``numba.set_num_threads`` count less one), for arguments of exactly
    the types of ``args`` (the twin is compiled for them now, SLP included).  Alone, in order,
    where ``helpers`` is 0 or another thread's job holds the pool.  Only where
    ``pool.available()``."""
    twin = pool.tasks_of(kernel)
    no_claims, no_pool = pool.NO_CLAIMS, pool.NO_POOL
    entry = here_entry(twin, *args, no_claims, no_pool, 0, 0)  # (the types of a pool's call)
    address = compiled_address(twin, (*args, no_claims, no_pool, 0, 0))

    def go(helpers, *call):
        if helpers > 0:
            p = pool.pool()  # (read at each call: a forked child's is its own)
            if p.lock.acquire(False):
                try:
                    return entry(*call, no_claims, p.ctrl, helpers, address)
                finally:
                    p.lock.release()
        return entry(*call, no_claims, no_pool, 0, 0)

    return go


def here(kernel, *args):
    """Call a kernel compiled without ``parallel=True`` (a serial twin, ``jit.serial_twin``, or
    a kernel of the calling thread's) on the calling thread: safe under every threading layer,
    from any thread and after ``fork``, so no policy applies; compiled with SLP where marked
    ``slp``, for each signature."""
    if kernel.slp:
        return here_entry(kernel, *args)(*args)
    return kernel(*args)


def here_entry(kernel, *args):
    """What calls ``kernel`` on the calling thread as ``here`` does, for arguments of exactly
    the types of ``args``: its compiled entry for them (``numba_private.entry_point``), built
    now, SLP included.  A plan keeps it: it saves a small call a third of its dispatch."""
    if kernel.slp:
        sig = tuple(kernel.typeof_pyval(a) for a in args)
        if sig not in kernel.overloads:
            with _lock:  # (as in ``_build_with_slp``)
                if sig not in kernel.overloads:
                    compile_with_slp(kernel, sig)
    return entry_point(kernel, args)


def _build_with_slp(kernel, args) -> None:
    # Under the lock: a second thread must not compile the same signature without SLP first.
    with _lock:
        key = (kernel, args[0].dtype)
        if key not in _slp_built:
            compile_with_slp(kernel, tuple(kernel.typeof_pyval(x) for x in args))
            _slp_built.add(key)


def _after_fork_in_child() -> None:
    global _forked_after_start
    if threading_layer() is not None:
        _forked_after_start = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
