"""MatMul: ``api`` (entry point) -> ``decisions`` -> ``dispatch`` -> the kernels."""
