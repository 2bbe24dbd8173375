"""Reporting: the environment line, the markdown tables, CSV and JSON records."""

from __future__ import annotations

import csv
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import __version__
from .cases import EVALUATOR, GEMM, FirstCall, Spread
from .contenders import CONTENDERS, NUMPY, OURS

if TYPE_CHECKING:
    from .runner import Row


# The CPU's vector features that decide which kernels run, and which peers' (LLVM's names).
_VECTOR_FLAGS = (
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512dq",
    "avx512bw",
    "avx512vl",
    "avx512bf16",
    "avx512vnni",
)


def environment() -> dict[str, Any]:
    """Versions, threads and processor: what a reader of the numbers needs to know."""
    import numba

    try:
        import onnxruntime

        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = None
    try:  # its metadata, not an import: importing torch takes seconds
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    from ..runtime.cpu import cpu_features

    flags = [f for f in _VECTOR_FLAGS if f in cpu_features()]
    return {
        "numba_onnx_ops": __version__,
        "numpy": np.__version__,
        "numba": numba.__version__,
        "ml_dtypes": importlib.metadata.version("ml_dtypes"),
        "onnxruntime": ort_version,
        "torch": torch_version,
        "python": platform.python_version(),
        "threads": numba.get_num_threads(),
        "cpu": cpu,
        "cpu_flags": flags,
        "cores": os.cpu_count(),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
    }


def environment_line(env: dict[str, Any]) -> str:
    ort = env["onnxruntime"] or "not installed"
    torch = f", torch {env['torch']}" if env.get("torch") else ""  # optional: named if there
    return (
        f"numba_onnx_ops {env['numba_onnx_ops']}, numpy {env['numpy']}, numba {env['numba']}, "
        f"onnxruntime {ort}{torch}; {env['threads']} threads on {env['cores']} cores ({env['cpu']}"
        f"{'; ' + ' '.join(env['cpu_flags']) if env.get('cpu_flags') else ''})"
    )


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def fmt_ratio(ratio: float) -> str:
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"


def fmt_spread(row: Row, name: str) -> str:
    """The spread of a contender's median: half its samples' interquartile range, as a share of
    the median (``±3%``), or ``""`` without samples."""
    if name not in row.quartiles:
        return ""
    q1, q3 = row.quartiles[name]
    share = 100 * (q3 - q1) / 2 / row.times[name]
    return f"±{share:.0f}%" if share >= 1 else f"±{share:.1f}%"


def fmt_median(row: Row, name: str) -> str:
    return f"{fmt_time(row.times[name])} {fmt_spread(row, name)}".rstrip()


def fmt_numba_work(work: Mapping[str, int]) -> str:
    """What numba did during a call, from ``runner.numba_work``."""
    if work.get("compiled"):
        return f"compiled {plural(work['compiled'], 'numba function')}"
    if work.get("locked"):
        return "kernels loaded from numba's on-disk cache"
    return "nothing compiled or loaded"


def plural(count: int, noun: str) -> str:
    """``1 case``, ``2 cases``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def fmt_first_calls(row: Row) -> str:
    parts = [f"{n} {fmt_time(t)}" for n, t in row.first_call.items()]
    verdict = (
        "all agree"
        if all(s in ("ok", "-") or s.startswith("n/a") for s in row.status.values())
        else "MISMATCH"
    )
    work = f" ({OURS}: {fmt_numba_work(row.first_call_work)})" if row.first_call_work else ""
    return ", ".join(parts) + f"{work}; {verdict}"


def _markdown(lines: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a markdown table whose first line is the header, columns padded."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for i, line in enumerate(lines):
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |")
        if i == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return out


def _cell(row: Row, name: str) -> str:
    if name in row.times:
        return fmt_median(row, name)
    status = row.status.get(name, "-")
    return status.split(":", 1)[0] if status != "-" else "-"


def format_table(
    rows: Sequence[Row], contenders: Sequence[str] = CONTENDERS, *, targets: bool = False
) -> str:
    """A markdown table: one line per case with the medians, the best peer and the speed-up
    (best peer's median / ours).  ``targets`` adds the speed-up each case aims for and whether
    this run reached it (a developer's view)."""
    header = ["case", "inputs", *contenders, "best peer", "speed-up"]
    if targets:
        header += ["target", "met"]
    lines = [header]
    for row in rows:
        best = row.best_peer
        ratio = row.ratio
        line = [
            row.case.name,
            row.case.label(row.size),
            *(_cell(row, n) for n in contenders),
            best[0] if best else "-",
            fmt_ratio(ratio) if ratio is not None else "-",
        ]
        if targets:
            met = {True: "yes", False: "no", None: "-"}[row.met]
            target = f">= {row.case.target:.3g}"
            line += [target if row.judged else f"({target})", met]
        if not row.ours_ok:
            line[-1] += " (ours " + row.status.get(OURS, "missing").split(":", 1)[0] + ")"
        lines.append(line)
    out = _markdown(lines)
    notes = _notes(rows, targets)
    return "\n".join(out + ([""] + notes if notes else []))


def peak_gflops(limits: Sequence[Mapping[str, Any]], threads: int | None) -> float | None:
    """The float32 FMA peak (GFLOP/s) on ``threads`` (``None``: numba's, all of them), the
    higher of the measurements in ``limits`` (``limits.measure``'s, before and after the cases:
    a busy machine only lowers it); ``None`` where none was measured on that many threads."""
    rates = []
    for peak in (lim.get("fma_peak") for lim in limits):
        if not peak:
            continue
        if threads == 1:
            rates.append(peak["gflops_one_thread"])
        elif threads is None or threads == peak["threads"]:
            rates.append(peak["gflops_all_threads"])
    return max(rates, default=None)


def gflops(row: Row, name: str) -> float | None:
    """A product's GFLOP/s for contender ``name`` (two operations per multiply-add), or
    ``None`` (not a product, or no time)."""
    flop = row.case.flop(row.size)
    if flop is None or name not in row.times:
        return None
    return flop / row.times[name] / 1e9


def format_gflops_table(
    rows: Sequence[Row],
    limits: Sequence[Mapping[str, Any]],
    contenders: Sequence[str] = CONTENDERS,
) -> str:
    """A markdown table of the GEMM group's rows in ``rows``: each contender's GFLOP/s and its
    share of the float32 FMA peak on the row's threads (:func:`peak_gflops`), or ``""`` without
    such rows."""
    gemm = [row for row in rows if row.case.group == GEMM and row.times]
    if not gemm:
        return ""
    names = [name for name in contenders if any(name in row.times for row in gemm)]
    header = ["case", "threads", "FMA peak", *names]
    lines = [header]
    for row in gemm:
        peak = peak_gflops(limits, row.case.threads)
        cells = []
        for name in names:
            rate = gflops(row, name)
            share = f" ({100 * rate / peak:.0f}%)" if rate is not None and peak else ""
            cells.append("-" if rate is None else f"{rate:.3g}{share}")
        threads = str(row.case.threads or "all")
        lines.append([row.case.name, threads, f"{peak:.0f}" if peak else "-", *cells])
    out = _markdown(lines)
    out += ["", GFLOPS_NOTE]
    return "\n".join(out)


GFLOPS_NOTE = (
    "- GFLOP/s: two operations per multiply-add, over the median time; in parentheses, its share "
    "of the FMA peak column: this run's float32 FMA peak on the row's threads, the higher of its "
    "measurements before and after the cases (float64 peaks at half of it, bfloat16 dot "
    "products with AVX512-BF16 at twice)"
)


SPREAD_NOTE = (
    "- ±: the spread of the samples behind each median, half their interquartile range as a "
    "share of the median"
)


EVALUATOR_NOTE = (
    f"- ReferenceEvaluator rows: {OURS} is onnx's ReferenceEvaluator with {OURS}' MatMul and Pow "
    f"(new_ops=numba_onnx_ops.reference.OPS); {NUMPY} is the same evaluator alone, which runs "
    "onnx's numpy implementation of every operator"
)


def _notes(rows: Sequence[Row], targets: bool) -> list[str]:
    notes = [SPREAD_NOTE] if any(row.quartiles for row in rows) else []
    if any(row.case.runtime == EVALUATOR for row in rows):
        notes.append(EVALUATOR_NOTE)
    unlimited = [row.case.name for row in rows if row.blas_limited is False]
    if unlimited:
        notes.append(
            "- numpy's BLAS kept its own thread count (OPENBLAS_NUM_THREADS, else one per core: "
            "threadpoolctl, in the bench extra, is not installed to hold it to the row's), and "
            f"so did the products of {OURS} that go to it, in {', '.join(unlimited)}"
        )
    for row in rows:
        for name, status in row.status.items():
            if status not in ("ok", "-"):
                notes.append(f"- {row.case.name}, {name}: {status}")
    if targets and any(not row.judged for row in rows):
        notes.append(
            "- target in parentheses: not the target's shapes (or --size tiny), so no verdict"
        )
    return notes


def spread_lines(spreads: Mapping[Spread, dict[str, float]]) -> list[str]:
    """One line per spread target timed (``runner.run_spreads``): our slowest median over the
    fastest, the limit, and whether it holds."""
    lines = []
    for spread, medians in spreads.items():
        ratio = spread.ratio(medians)
        met = "yes" if spread.met(medians) else "no"
        times = ", ".join(fmt_time(medians[name]) for name in spread.cases)
        lines.append(
            f"- spread of our times, {spread.name} ({', '.join(spread.cases)}: {times}, timed"
            f" together): slowest / fastest {ratio:.2f}, target <= {spread.limit:g}, met: {met}"
        )
    return lines


def first_call_lines(first_calls: Mapping[FirstCall, Sequence[float]]) -> list[str]:
    """One line per first-call target timed (``runner.run_first_calls``): the median of its
    runs, the limit, and whether it holds."""
    lines = []
    for first, times in first_calls.items():
        median = statistics.median(times)
        met = "yes" if first.met(times) else "no"
        runs = ", ".join(f"{t:.2f}" for t in times)
        lines.append(
            f"- first call, {first.label} ({first.name}), fresh process, empty numba cache: "
            f"median {median:.2f} s ({runs} s), target <= {first.limit:g} s, met: {met}"
        )
    return lines


def row_record(row: Row, *, targets: bool = False) -> dict[str, Any]:
    """A flat, JSON- and CSV-friendly record of one row (times in seconds, each median with the
    first and third quartiles of its samples, ``_q1_s`` and ``_q3_s``; the numba functions our
    first call compiled; a model's runtime, ``None`` for an operator call; for a product, its
    operations, ``flop``, and each contender's ``_gflops``); ``targets`` adds the case's target
    speed-up and whether it was met."""
    (sa, sb), best = row.case.shapes_at(row.size), row.best_peer
    record: dict[str, Any] = {
        "case": row.case.name,
        "op": row.case.op,
        "runtime": row.case.runtime,
        "inputs": row.case.label(row.size),
        "size": row.size,
        "dtype_a": row.case.dtypes[0],
        "dtype_b": row.case.dtypes[1],
        "shape_a": list(sa),
        "shape_b": list(sb),
        "threads": row.case.threads,
        "flop": row.case.flop(row.size),
    }
    for name in CONTENDERS:
        key = name.replace(" ", "_")
        q1, q3 = row.quartiles.get(name, (None, None))
        record[f"{key}_s"] = row.times.get(name)
        record[f"{key}_q1_s"] = q1
        record[f"{key}_q3_s"] = q3
        record[f"{key}_gflops"] = gflops(row, name)
        record[f"{key}_status"] = row.status.get(name, "-")
    record.update(
        {
            "ours_first_call_s": row.first_call.get(OURS),
            "ours_first_call_compiled": row.first_call_work.get("compiled"),
            "rounds": row.rounds,
            "best_peer": best[0] if best else None,
            "best_peer_s": best[1] if best else None,
            "speed_up": row.ratio,
        }
    )
    if targets:
        record.update({"target": row.case.target, "met": row.met})
    return record


def write_csv(rows: Sequence[Row], path: str, *, targets: bool = False) -> None:
    records = [row_record(r, targets=targets) for r in rows]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]) if records else ["case"])
        writer.writeheader()
        for record in records:
            writer.writerow(
                {k: "x".join(map(str, v)) if isinstance(v, list) else v for k, v in record.items()}
            )


def write_json(
    rows: Sequence[Row],
    path: str,
    env: dict[str, Any],
    *,
    targets: bool = False,
    spreads: Mapping[Spread, dict[str, float]] | None = None,
    first_calls: Mapping[FirstCall, Sequence[float]] | None = None,
    warnings: Sequence[str] = (),
) -> None:
    """The environment, the ``warnings`` (why the times may be off, from ``limits.busy_signs``)
    and one record per row; with ``spreads``, also each spread target's medians (seconds), limit
    and whether it held; with ``first_calls``, each first-call target's times (seconds), limit
    and whether their median held."""
    data: dict[str, Any] = {
        "environment": env,
        "warnings": list(warnings),
        "rows": [row_record(r, targets=targets) for r in rows],
    }
    if spreads:
        data["spreads"] = [
            {
                "name": spread.name,
                "medians_s": dict(medians),
                "limit": spread.limit,
                "met": spread.met(medians),
            }
            for spread, medians in spreads.items()
        ]
    if first_calls:
        data["first_calls"] = [
            {
                "name": first.name,
                "call": first.label,
                "times_s": list(times),
                "limit_s": first.limit,
                "met": first.met(times),
            }
            for first, times in first_calls.items()
        ]
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def output_problem(path: str) -> str | None:
    """Why ``path`` cannot be written, or ``None``: checked before a run, not after it."""
    target = Path(path)
    if target.is_dir():
        return "is a directory"
    folder = target.parent
    if not folder.is_dir():
        return f"no such directory: {folder}"
    if not os.access(target if target.exists() else folder, os.W_OK):
        return "permission denied"
    return None


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
