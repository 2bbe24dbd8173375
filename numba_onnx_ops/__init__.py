"""Numba JIT-compiled kernels for the ONNX operators MatMul and Pow.

>>> import numba_onnx_ops as nox
>>> nox.matmul(a, b)          # doctest: +SKIP
>>> nox.pow(x, 3.0, opset=13)  # doctest: +SKIP

Nothing compiles at import: each kernel compiles on first use for a dtype and numba caches it
on disk.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from .core.versions import NEWEST_OPSET, resolve_version
from .core.versions import PUBLIC_TABLES as _PUBLIC_TABLES
from .core.versions import public_table as _public_table
from .ops.matmul import overloads as _matmul_overloads  # noqa: F401 - matmul in @njit code
from .ops.matmul.api import matmul
from .ops.pow import overloads as _pow_overloads  # noqa: F401 - pow in @njit code
from .ops.pow.api import pow  # noqa: A004 - the ONNX operator's name
from .precompile import compiled_specializations, warmup
from .runtime import parallel as _parallel
from .runtime.memory import release_memory

_parallel.prefer_tbb()  # before any kernel starts numba's threads


def __getattr__(name: str):
    # MATMUL_TYPES and POW_TYPES (see ``core.versions.public_table``), built on first access.
    if name in _PUBLIC_TABLES:
        return _public_table(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


try:  # the one version is pyproject.toml's, read from the installed metadata
    __version__: str = _metadata.version(__name__)
except _metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "matmul",
    "pow",
    "warmup",
    "compiled_specializations",
    "release_memory",
    "resolve_version",
    "NEWEST_OPSET",
    "MATMUL_TYPES",
    "POW_TYPES",
    "__version__",
]
