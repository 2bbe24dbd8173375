"""Spies on where the package runs its work: every kernel and every BLAS call.

Kernels run in one of two places: on the pool (``parallel.launch``, or the compiled entry a
plan keeps from ``parallel.pool_entry``: a kernel compiled with ``parallel=True``; or the own
pool's ``parallel.pool_runner``, a task twin ``<name>_tasks``, on more than one thread) or on the
calling thread (``parallel.here``, and the compiled entries a plan
keeps from ``parallel.here_entry``: a serial twin of a pool kernel, ``<name>_here``, or a Pow
kernel of the calling thread, ``pow_<class>_here``).  A spy reports each kernel run by its
pool kernel's name (``matmul_direct_here`` -> ``matmul_direct``) and the place it ran ("pool"
or "here"), and each product handed to numpy's BLAS as ("blas", "blas").

The compiled entries of ``here_entry`` and ``pool_entry`` are made once, by a plan: the spy
wraps them then, so a plan made before the spy was installed runs unseen (the autouse fixture
in conftest.py clears the plans before every test).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable

import numpy as np

POOL, HERE, BLAS = "pool", "here", "blas"


def kernel_name(kernel) -> str:
    """The name of the pool kernel ``kernel`` stands for: its own, less a ``_here`` or a
    ``_tasks`` suffix (a serial twin, a task twin)."""
    name = kernel.py_func.__name__
    return name.removesuffix("_here").removesuffix("_tasks")


def spy_on_kernels(monkeypatch, record: Callable[[str, str], None]) -> None:
    """Call ``record(name, place)`` for every kernel the package runs and every BLAS call,
    once per call: the outermost of nested calls (``launch`` running a serial twin after a
    fork, ``here`` running a kernel through its entry) is the one recorded."""
    parallel = importlib.import_module("numba_onnx_ops.runtime.parallel")
    blas = importlib.import_module("numba_onnx_ops.ops.matmul.blas")
    real_launch, real_here = parallel.launch, parallel.here
    real_entry, real_blas = parallel.here_entry, blas.matmul
    real_pool_entry = parallel.pool_entry
    real_runner = parallel.pool_runner
    state = threading.local()

    def outermost(name: str, place: str, call, *args, **kwargs):
        depth = getattr(state, "depth", 0)
        if depth == 0:
            record(name, place)
        state.depth = depth + 1
        try:
            return call(*args, **kwargs)
        finally:
            state.depth = depth

    def launch(kernel, *args):
        return outermost(kernel_name(kernel), POOL, real_launch, kernel, *args)

    def here(kernel, *args):
        return outermost(kernel_name(kernel), HERE, real_here, kernel, *args)

    def here_entry(kernel, *args):
        entry = real_entry(kernel, *args)
        if getattr(state, "depth", 0):
            return entry  # (inside ``here``, which recorded the call)
        name = kernel_name(kernel)
        return lambda *a: outermost(name, HERE, entry, *a)

    def pool_entry(kernel, *args):
        entry = real_pool_entry(kernel, *args)
        if entry is None:
            return None
        name = kernel_name(kernel)
        return lambda *a: outermost(name, POOL, entry, *a)

    def runner(kernel, args):
        go = real_runner(kernel, args)
        name = kernel_name(kernel)

        def run(helpers, *a):  # (a runner with no helpers runs its twin alone, here)
            return outermost(name, POOL if helpers > 0 else HERE, go, helpers, *a)

        return run

    def blas_matmul(*args, **kwargs):
        return outermost(BLAS, BLAS, real_blas, *args, **kwargs)

    # Every kernel call and every BLAS call goes through these names.
    monkeypatch.setattr(parallel, "launch", launch)
    monkeypatch.setattr(parallel, "here", here)
    monkeypatch.setattr(parallel, "here_entry", here_entry)
    monkeypatch.setattr(parallel, "pool_entry", pool_entry)
    monkeypatch.setattr(parallel, "pool_runner", runner)
    monkeypatch.setattr(blas, "matmul", blas_matmul)


class GeneralOut(np.ndarray):
    """An ``out`` of this ndarray subclass takes an operator's general path, which makes every
    decision again: the plans take plain ndarrays only."""


class Launches(list):
    """The kernels the package ran, by their pool kernel's name, in order, and "blas" for each
    product handed to numpy's BLAS; ``places`` says where each ran ("pool", "here", "blas"),
    and ``pool`` / ``here`` list the names of those that ran there."""

    def __init__(self) -> None:
        super().__init__()
        self.places: list[str] = []
        self._lock = threading.Lock()

    def add(self, name: str, place: str) -> None:
        with self._lock:  # (the two lists in step, whatever thread calls)
            self.append(name)
            self.places.append(place)

    @property
    def pool(self) -> list[str]:
        return [n for n, p in zip(self, self.places, strict=True) if p == POOL]

    @property
    def here(self) -> list[str]:
        return [n for n, p in zip(self, self.places, strict=True) if p == HERE]

    def clear(self) -> None:
        with self._lock:
            super().clear()
            self.places.clear()
