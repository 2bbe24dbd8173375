"""dask arrays: numba_onnx_ops against dask's own functions, one chunk against the in-memory
call, and the zarr-to-zarr stream with its peak memory.

Each comparison is one benchmark with an ``implementation`` parameter, so one ``asv run`` puts
the contenders side by side.  Graphs run on dask's threaded scheduler; inputs are persisted in
``setup``, and every implementation computes once there, so no compile time is timed.
"""

from __future__ import annotations

import shutil
import tempfile

import numpy as np

import numba_onnx_ops as nox

from .common import TINY, random_array, shape


def _compute(x):
    return x.compute(scheduler="threads")


class DaskPow:
    """x ** 3.7 on (8000, 10000) in 1000-row chunks: ours against ``dask.array.power``."""

    params = (["float32", "float16"], ["numba_onnx_ops", "dask"])
    param_names = ("dtype", "implementation")
    timeout = 300

    def setup(self, dtype_name, implementation):
        import dask.array as da

        x = random_array(np.random.default_rng(0), shape(8000, 10_000), dtype_name, (0.25, 4.0))
        self.x = da.from_array(x, chunks=(min(1000, x.shape[0]), -1)).persist()
        self.power = nox.pow if implementation == "numba_onnx_ops" else da.power
        self.e = x.dtype.type(3.7)
        self.time_pow(dtype_name, implementation)

    def time_pow(self, dtype_name, implementation):
        _compute(self.power(self.x, self.e))


class DaskMatMul:
    """int32 (2048, 1024) @ (1024, 1024) in 512-chunks: ours against ``dask.array.matmul``
    (numpy's integer loop per block)."""

    params = (["numba_onnx_ops", "dask"],)
    param_names = ("implementation",)
    timeout = 600
    number = 1
    repeat = (1, 3, 60.0)

    def setup(self, implementation):
        import dask.array as da

        rng = np.random.default_rng(0)
        chunk = shape(512)[0]
        self.a = da.from_array(random_array(rng, shape(2048, 1024), "int32"), chunks=chunk)
        self.b = da.from_array(random_array(rng, shape(1024, 1024), "int32"), chunks=chunk)
        self.a, self.b = self.a.persist(), self.b.persist()
        self.product = nox.matmul if implementation == "numba_onnx_ops" else da.matmul
        if implementation == "numba_onnx_ops":  # compile outside the timing
            self.time_matmul(implementation)

    def time_matmul(self, implementation):
        _compute(self.product(self.a, self.b))


class DaskOneChunk:
    """float32 x ** 3.7 on 10 million elements in one chunk against the in-memory call: what
    the dask layer adds (graph, task, thread policy).  ``persist`` keeps the result, so dask's
    own copy of a single-chunk result at ``compute`` is not in the figure.  ``dask, 10x10``
    is the same call on a 10 x 10 chunk: dask's fixed cost of building and persisting a
    one-task graph, which the 10M-element call cannot go below."""

    params = (["dask", "in-memory", "dask, 10x10"],)
    param_names = ("implementation",)

    def setup(self, implementation):
        import dask.array as da

        self.x = random_array(np.random.default_rng(0), shape(1000, 10_000), "float32", (0.25, 4))
        if implementation == "dask, 10x10":
            self.x = self.x[:10, :10].copy()
        self.dx = da.from_array(self.x, chunks=-1).persist()
        self.time_pow(implementation)

    def time_pow(self, implementation):
        if implementation == "in-memory":
            nox.pow(self.x, 3.7)
        else:
            nox.pow(self.dx, 3.7).persist(scheduler="threads")


class ZarrStream:
    """zarr to zarr through Pow (float16 ^ 3.7) and MatMul (int32 @ a (512, 256) numpy
    operand), 64 MiB per input in 4 MiB row chunks, on the threaded scheduler.
    ``track_peak_memory``: the most any stage raised the process's resident memory, in MiB."""

    timeout = 600
    number = 1
    repeat = (1, 3, 60.0)

    def setup(self):
        from numba_onnx_ops.integrations import zarr_stream as _stream

        self.dir = tempfile.mkdtemp()
        nbytes = (1 << 20) if TINY else (64 << 20)
        self.data = _stream.prepare(self.dir, nbytes, chunk_bytes=nbytes // 16)
        self.stages = _stream.stages(self.data)
        _stream.warm(self.data)
        self.report = _stream.run(self.data)  # measures the memory once
        _stream.check(self.data)

    def teardown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def time_pow_stream(self):
        import dask

        with dask.config.set(scheduler="threads"):
            self.stages["pow float16 ^ 3.7"]()

    def time_matmul_stream(self):
        import dask

        with dask.config.set(scheduler="threads"):
            next(v for k, v in self.stages.items() if k.startswith("matmul"))()

    def track_peak_memory(self):
        return max(s["peak_rss"][0] - s["rss_before"][0] for s in self.report.values()) / 2**20

    track_peak_memory.unit = "MiB"
