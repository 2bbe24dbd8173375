"""MatMul and Pow for onnx's reference evaluator (``new_ops=OPS``), on numba_onnx_ops' kernels.

>>> from numba_onnx_ops.reference import OPS
>>> sess = ReferenceEvaluator(model, new_ops=OPS)   # doctest: +SKIP

The implementation lives in ``numba_onnx_ops.integrations.onnx_evaluator``.
"""

from .integrations.onnx_evaluator import *  # noqa: F403
from .integrations.onnx_evaluator import __all__  # noqa: F401
