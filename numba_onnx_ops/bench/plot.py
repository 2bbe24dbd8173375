"""The bar chart of ``bench --plot`` (matplotlib is imported only here, and only when asked)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .contenders import CONTENDERS, NUMPY, ORT, OURS, UPCAST
from .report import environment_line, fmt_ratio

if TYPE_CHECKING:
    from .runner import Row


def plot(rows: Sequence[Row], path: str, env: dict[str, Any], *, targets: bool = False) -> None:
    """A two-panel bar chart: median time per contender and the speed-up per case (log scales,
    1 marked); ``targets`` marks each case's target speed-up and colours the bars by it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.case.name for r in rows]
    y = np.arange(len(rows))
    fig, (ax_t, ax_r) = plt.subplots(
        1, 2, figsize=(15, 0.42 * len(rows) + 2.2), sharey=True, width_ratios=(3, 2)
    )
    colors = {OURS: "tab:blue", NUMPY: "tab:orange", UPCAST: "tab:olive", ORT: "tab:purple"}
    height = 0.8 / len(CONTENDERS)
    for k, name in enumerate(CONTENDERS):
        values = [r.times.get(name, np.nan) for r in rows]
        if np.all(np.isnan(values)):
            continue
        ax_t.barh(y - 0.4 + height * (k + 0.5), values, height, label=name, color=colors[name])
    ax_t.set_xscale("log")
    ax_t.set_xlabel("median time per call (seconds, log scale)")
    ax_t.set_yticks(y, names)
    ax_t.invert_yaxis()
    ax_t.grid(axis="x", which="both", alpha=0.3)
    ax_t.legend(loc="best", fontsize="small")
    ax_t.set_title("time per call (shorter is faster)")

    ratios = [r.ratio if r.ratio is not None else np.nan for r in rows]
    if targets:
        bar_colors = [{True: "tab:green", False: "tab:red", None: "tab:gray"}[r.met] for r in rows]
        goals = [r.case.target for r in rows]
        ax_r.scatter(goals, y, marker="|", s=300, color="black", zorder=3, label="target")
        ax_r.legend(loc="lower right", fontsize="small")
        ax_r.set_title("speed-up (green: target met, red: missed, gray: no verdict)")
    else:
        bar_colors = ["tab:blue" if not np.isnan(v) and v >= 1 else "tab:gray" for v in ratios]
        goals = [np.nan] * len(rows)
        ax_r.set_title("speed-up (> 1: numba_onnx_ops is faster)")
    ax_r.barh(y, ratios, 0.6, color=bar_colors)
    ax_r.axvline(1.0, color="black", linewidth=0.8)
    ax_r.set_xscale("log")
    known = [v for v in ratios + goals if not np.isnan(v)] or [1.0]
    ax_r.set_xlim(min(known) / 1.5, max(known) * 3)  # room for the labels right of the bars
    ax_r.set_xlabel("speed-up: best peer's median / ours (log scale; > 1 is faster)")
    ax_r.grid(axis="x", which="both", alpha=0.3)
    for yi, ratio, goal in zip(y, ratios, goals, strict=True):
        if not np.isnan(ratio):
            ax_r.annotate(
                fmt_ratio(ratio),
                (ratio if np.isnan(goal) else max(ratio, goal), yi),
                xytext=(5, 0),
                textcoords="offset points",
                va="center",
                fontsize="small",
            )
    fig.suptitle(
        f"numba_onnx_ops peer comparison ({rows[0].size if rows else 'full'} size)\n"
        + environment_line(env),
        fontsize="medium",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check_plot_available() -> str | None:
    """``None`` when ``--plot`` can work, else the message to show."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib: pip install 'numba_onnx_ops[bench]' (or matplotlib)"
    return None
