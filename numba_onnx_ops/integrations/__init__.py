"""Built on the operators: dask arrays, the zarr stream, the ONNX backend and evaluator ops."""
