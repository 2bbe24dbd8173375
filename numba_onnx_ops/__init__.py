"""Numba JIT-compiled kernels for the ONNX operators MatMul and Pow.

>>> import numba_onnx_ops as nox
>>> nox.matmul(a, b)          # doctest: +SKIP
>>> nox.pow(x, 3.0, opset=13)  # doctest: +SKIP

Kernels compile on first use for each dtype and are cached on disk by numba.
"""

from __future__ import annotations

from ._versions import MATMUL_TYPES, POW_TYPES, resolve_version
from .matmul import matmul
from .power import pow  # noqa: A004 - the ONNX operator's name

__version__ = "0.1.0"

__all__ = ["matmul", "pow", "resolve_version", "MATMUL_TYPES", "POW_TYPES", "__version__"]
