"""The ONNX backend (``onnx.backend.base.Backend``): MatMul and Pow on numba_onnx_ops' kernels,
every other operator on onnx's reference implementation.

>>> from numba_onnx_ops.backend import Backend
>>> rep = Backend.prepare(model)                 # doctest: +SKIP
>>> rep.placement()                              # doctest: +SKIP

The implementation lives in ``numba_onnx_ops.integrations.onnx_backend``.
"""

from .integrations.onnx_backend import *  # noqa: F403
from .integrations.onnx_backend import __all__  # noqa: F401
