"""One sub-package per operator: entry point, decisions, dispatch, kernels."""
