"""Pow: ``api`` (entry point) -> ``decisions`` -> ``plan`` -> the kernels."""
