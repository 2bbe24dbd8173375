"""The bar chart of ``bench --plot`` (matplotlib is imported only here, and only when asked)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .cases import EVALUATOR
from .contenders import CONTENDERS, NUMPY, ORT, OURS, TORCH, UPCAST
from .report import environment_line, fmt_ratio, fmt_time

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .runner import Row

# Speed-up ticks, each also as its inverse: even steps on a log axis, short labels.
_RATIO_STEPS = (1.1, 1.25, 1.5, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000)
_COLORS = {
    OURS: "tab:blue",
    NUMPY: "tab:orange",
    UPCAST: "tab:olive",
    ORT: "tab:purple",
    TORCH: "tab:brown",
}
_LABEL_CHARS = 55
_CHAR_INCHES = 0.085  # a character of a tick label, about (10-point DejaVu Sans)


def case_labels(rows: Sequence[Row]) -> list[str]:
    """The y labels: the inputs each case ran on (at a smaller size, its names would mislead:
    ``matmul-f16-1024`` runs 256x256 under ``--quick``), with the case's name only where two
    cases ran on the same inputs (every shape cut to a few elements under ``--size tiny``)."""
    labels = [row.case.label(row.size) for row in rows]
    repeated = Counter(labels)
    return [
        f"{label} ({row.case.name})" if repeated[label] > 1 else label
        for label, row in zip(labels, rows, strict=True)
    ]


def legend_name(name: str, rows: Sequence[Row]) -> str:
    """A contender's name in the legend: ``numpy`` says that, on ReferenceEvaluator rows, it
    stands for the evaluator alone (onnx's numpy implementation)."""
    if name == NUMPY and any(row.case.runtime == EVALUATOR for row in rows):
        return f"{NUMPY} (ReferenceEvaluator rows: the evaluator alone)"
    return name


def ratio_limit(values: Sequence[float]) -> float:
    """The half-width ``L`` of the speed-up axis, ``1/L`` to ``L``: centred on 1 on a log
    scale, so that a loss and a win by the same factor draw bars of the same length, with room
    past the longest bar for its label."""
    known = [v for v in values if np.isfinite(v) and v > 0]
    widest = max((max(v, 1 / v) for v in known), default=1.0)
    return max(2.0, widest**1.3 * 1.4)


def ratio_ticks(limit: float) -> list[float]:
    """Speed-up ticks within ``1/limit .. limit``, symmetric about 1 and spaced so that their
    labels do not run into each other."""
    steps, gap = [], math.log(limit) / 4
    for step in _RATIO_STEPS:
        if step <= limit and math.log(step) - math.log(steps[-1] if steps else 1.0) >= gap:
            steps.append(step)
    return sorted([1.0, *steps, *(1 / s for s in steps)])


def _fmt_ratio_tick(value: float, _pos=None) -> str:
    return f"{value:g}" if value >= 1 else f"{value:.2g}"


def figure(
    rows: Sequence[Row],
    env: dict[str, Any],
    *,
    targets: bool = False,
    warnings: Sequence[str] = (),
) -> Figure:
    """The chart of :func:`plot`, not saved."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

    y = np.arange(len(rows))
    labels = case_labels(rows)
    # 15 inches hold labels of up to _LABEL_CHARS characters beside the two panels; each more
    # widens the figure by about its width (a model in onnx's evaluator: 73).
    longest = max((len(label) for label in labels), default=0)
    width = 15 + _CHAR_INCHES * max(0, longest - _LABEL_CHARS)
    fig, (ax_t, ax_r) = plt.subplots(
        1,
        2,
        figsize=(width, 0.42 * len(rows) + 2.6),
        sharey=True,
        width_ratios=(3, 2),
        layout="constrained",
    )
    height = 0.8 / len(CONTENDERS)
    times = []
    for k, name in enumerate(CONTENDERS):
        values = np.array([r.times.get(name, np.nan) for r in rows])
        if np.all(np.isnan(values)):
            continue
        # Whiskers from the first to the third quartile of the samples behind each median.
        quartiles = np.array([r.quartiles.get(name, (v, v)) for r, v in zip(rows, values)]).T
        times.extend(quartiles[~np.isnan(quartiles)])
        ax_t.barh(
            y - 0.4 + height * (k + 0.5),
            values,
            height,
            xerr=np.nan_to_num(np.abs(quartiles - values)),
            error_kw={"elinewidth": 0.8, "capsize": 1.5, "ecolor": "black"},
            label=legend_name(name, rows),
            color=_COLORS[name],
        )
    ax_t.set_xscale("log")
    if times:
        lo, hi = min(times), max(times)
        ax_t.set_xlim(lo / 1.4, hi * 1.4)
        # Enough ticks to read a time off, too few to crowd: every step within a decade, 1-2-5
        # steps over a few decades, else decades alone.
        subs = range(1, 10) if hi / lo < 10 else (1, 2, 5) if hi / lo < 1e3 else (1,)
        ax_t.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax_t.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt_time(v)))
    ax_t.xaxis.set_minor_locator(NullLocator())
    ax_t.set_xlabel("median time per call (log scale; whiskers: middle half of the samples)")
    ax_t.set_yticks(y, labels)
    ax_t.set_ylim(len(rows) - 0.5, -0.5)  # the first case on top, no empty rows around
    ax_t.grid(axis="x", alpha=0.3)
    ax_t.set_title("time per call (shorter is faster)")

    ratios = [r.ratio if r.ratio is not None else np.nan for r in rows]
    if targets:
        bar_colors = [{True: "tab:green", False: "tab:red", None: "tab:gray"}[r.met] for r in rows]
        goals = [r.case.target for r in rows]
        ax_r.scatter(goals, y, marker="|", s=300, color="black", zorder=3, label="target")
        ax_r.set_title("speed-up\n(green: target met, red: missed, gray: no verdict)")
    else:
        bar_colors = ["tab:blue" if not np.isnan(v) and v >= 1 else "tab:gray" for v in ratios]
        goals = [np.nan] * len(rows)
        ax_r.set_title("speed-up (> 1: numba_onnx_ops is faster)")
    # Bars from 1: a loss points left, a win right, each as long as its factor.
    ax_r.barh(y, np.array(ratios) - 1.0, 0.6, left=1.0, color=bar_colors)
    ax_r.axvline(1.0, color="black", linewidth=0.8)
    ax_r.set_xscale("log")
    limit = ratio_limit(ratios + goals)
    ax_r.set_xlim(1 / limit, limit)
    ax_r.xaxis.set_major_locator(FixedLocator(ratio_ticks(limit)))
    ax_r.xaxis.set_major_formatter(FuncFormatter(_fmt_ratio_tick))
    ax_r.xaxis.set_minor_locator(NullLocator())
    ax_r.set_xlabel("speed-up: best peer's median / ours (log scale, centred on 1)")
    ax_r.grid(axis="x", alpha=0.3)
    for yi, ratio, goal in zip(y, ratios, goals, strict=True):
        if np.isnan(ratio):
            continue
        reach = [ratio] if np.isnan(goal) else [ratio, goal]
        right = ratio >= 1
        ax_r.annotate(
            fmt_ratio(ratio),
            (max(reach) if right else min(reach), yi),
            xytext=(4 if right else -4, 0),
            textcoords="offset points",
            ha="left" if right else "right",
            va="center",
            fontsize="small",
        )
    handles, names = ax_t.get_legend_handles_labels()
    more, more_names = ax_r.get_legend_handles_labels()
    fig.legend(
        handles + more, names + more_names, loc="outside lower center", ncols=len(names) + 1
    )  # below the panels, where it covers no bar
    title = f"numba_onnx_ops peer comparison ({rows[0].size if rows else 'full'} size)"
    title += "\n" + environment_line(env)
    if warnings:
        title += "\nWARNING: the machine looked busy; these times may be far off"
    fig.suptitle(title, fontsize="medium")
    return fig


def plot(
    rows: Sequence[Row],
    path: str,
    env: dict[str, Any],
    *,
    targets: bool = False,
    warnings: Sequence[str] = (),
) -> None:
    """A two-panel bar chart: median time per contender with the spread of its samples, and
    the speed-up per case on a log axis centred on 1, as bars from 1; ``targets`` marks each
    case's target speed-up and colours the bars by it; ``warnings`` (``limits.busy_signs``)
    add a line to the title."""
    import matplotlib.pyplot as plt

    fig = figure(rows, env, targets=targets, warnings=warnings)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check_plot_available() -> str | None:
    """``None`` when ``--plot`` can work, else the message to show."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib: pip install 'numba_onnx_ops[bench]' (or matplotlib)"
    return None


def plot_path_problem(path: str) -> str | None:
    """Why matplotlib cannot save to ``path`` (a file type it does not write), or ``None``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    kind = Path(path).suffix.lower().lstrip(".")
    formats = FigureCanvasAgg.get_supported_filetypes()
    if kind and kind not in formats:
        return f"matplotlib cannot write .{kind} files; use one of " + ", ".join(
            f".{f}" for f in sorted(formats)
        )
    return None
