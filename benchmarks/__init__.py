"""airspeed velocity (asv) benchmarks of numba_onnx_ops; see asv.conf.json at the top level.

Modules: ``matmul`` (MatMul classes), ``power`` (Pow classes), ``compile`` (first-call latency
in a fresh process), ``common`` (dtypes, shapes, inputs and throughput helpers they share).
tests/test_benchmarks.py runs every benchmark once at a tiny size.
"""
