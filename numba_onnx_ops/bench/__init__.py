"""Peer comparison: numba_onnx_ops against numpy, onnxruntime and PyTorch, timed side by side.

``python -m numba_onnx_ops bench`` runs every case of :mod:`.cases` outside a group (a group,
such as the GEMM rows, runs when ``--cases`` names it), each contender on the same threads
(:func:`.contenders.contender_threads`; torch only where installed).  For each case it

1. builds seeded inputs (:mod:`.cases`),
2. calls every contender (:mod:`.contenders`) once (for this library that first call includes
   compilation) and checks each result against a reference (:mod:`.checking`: exact for integers,
   a tolerance in ulps or in units of ``K * eps * (|A| @ |B|)`` for floats); a contender that
   disagrees is reported and not timed,
3. times the contenders interleaved (:mod:`.timing`): in each round every contender takes one
   sample (as many back-to-back calls as last a few milliseconds), after a pause that lets the
   previous contender's worker threads stop spinning; the order changes from round to round so
   that each contender follows each other equally often, and the median sample per contender is
   kept, with the interquartile range of the samples as its spread,
4. reports ``speed-up = best peer's median / ours`` (:mod:`.report`, :mod:`.plot`): above 1 this
   library is faster.  ``--targets`` adds the speed-up each case aims for, and the targets on
   our times alone: their spread over input distributions, and first calls in a fresh process
   with an empty numba cache (:data:`.cases.FIRST_CALLS`).  Above the table,
   the machine's limits measured before and after the cases (:mod:`.limits`): the float32 FMA
   peak and the speed of a copy, against which a MatMul's GFLOP/s or a Pow's bytes can be
   read, and a warning when they show that something else used the machine.  Below it, the
   GEMM rows' GFLOP/s, each beside the FMA peak on the row's threads.

A case is one operator call, or a small model (``((x @ w1) ** 2) @ w2``) on one of two runtimes:
our ``Backend``, against onnxruntime, or onnx's ``ReferenceEvaluator`` with our MatMul and Pow
(``new_ops=numba_onnx_ops.reference.OPS``), against the same evaluator alone, which runs onnx's
numpy implementation and takes the ``numpy`` column of those rows.

:mod:`.runner` ties the steps together.  matplotlib is needed only for ``--plot``.
"""

from __future__ import annotations

from .cases import (
    BACKEND,
    CASES,
    DEMO_CASES,
    EVALUATOR,
    FIRST_CALLS,
    GEMM,
    GROUPS,
    MODEL_RUNTIMES,
    SPREADS,
    TINY_DIM,
    Case,
    FirstCall,
    Spread,
    first_calls_only,
    make_inputs,
    select,
    select_cases,
    select_first_calls,
)
from .checking import POW_ULPS, check
from .contenders import (
    CONTENDERS,
    MAIN_CONTENDERS,
    NUMPY,
    ORT,
    OURS,
    PEERS,
    TORCH,
    TORCH_INSTALL,
    UPCAST,
    Unavailable,
    available_contenders,
    contender_threads,
)
from .limits import busy_signs, limits_line
from .limits import measure as measure_limits
from .plot import check_plot_available, plot, plot_path_problem
from .report import (
    environment,
    environment_line,
    first_call_lines,
    fmt_numba_work,
    format_gflops_table,
    format_table,
    output_problem,
    plural,
    row_record,
    spread_lines,
    stderr_progress,
    write_csv,
    write_json,
)
from .runner import Row, numba_work, run_case, run_comparison, run_first_calls, run_spreads
from .timing import SIZES, TIMINGS, Timing, steady_call_time, time_interleaved, wait_until_idle

__all__ = [
    "BACKEND",
    "CASES",
    "CONTENDERS",
    "DEMO_CASES",
    "EVALUATOR",
    "FIRST_CALLS",
    "GEMM",
    "GROUPS",
    "MAIN_CONTENDERS",
    "MODEL_RUNTIMES",
    "NUMPY",
    "ORT",
    "OURS",
    "PEERS",
    "POW_ULPS",
    "SIZES",
    "SPREADS",
    "TIMINGS",
    "TINY_DIM",
    "TORCH",
    "TORCH_INSTALL",
    "UPCAST",
    "Case",
    "FirstCall",
    "Row",
    "Spread",
    "Timing",
    "Unavailable",
    "available_contenders",
    "busy_signs",
    "check",
    "check_plot_available",
    "contender_threads",
    "environment",
    "environment_line",
    "first_call_lines",
    "first_calls_only",
    "fmt_numba_work",
    "format_gflops_table",
    "format_table",
    "limits_line",
    "make_inputs",
    "measure_limits",
    "numba_work",
    "output_problem",
    "plot",
    "plot_path_problem",
    "plural",
    "row_record",
    "run_case",
    "run_comparison",
    "run_first_calls",
    "run_spreads",
    "select",
    "select_cases",
    "select_first_calls",
    "spread_lines",
    "stderr_progress",
    "steady_call_time",
    "time_interleaved",
    "wait_until_idle",
    "write_csv",
    "write_json",
]
