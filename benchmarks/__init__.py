"""airspeed velocity (asv) benchmarks of numba_onnx_ops; see asv.conf.json at the top level.

Modules: ``matmul`` (MatMul classes), ``power`` (Pow classes), ``percall`` (the cost of one small
call, and a small model through the Backend, onnx's evaluator and onnxruntime), ``compile``
(first-call latency in a fresh process), ``common`` (dtypes, shapes, inputs and helpers they share).
tests/test_benchmarks.py runs every benchmark once at a tiny size.
"""
