"""Numba kernels: loops only, on validated arrays with a preallocated output."""
