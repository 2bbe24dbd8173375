"""The pictures: ``bench --plot`` and the notebooks' figures, drawn with matplotlib's Agg and read
back from the figure: scales, limits, labels, and no text on top of other text or of the bars."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from numba_onnx_ops import bench as _bench

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
plt = pytest.importorskip("matplotlib.pyplot")
from matplotlib.container import BarContainer  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ENV = {
    "numba_onnx_ops": "0", "numpy": "0", "numba": "0", "onnxruntime": None, "threads": 2,
    "cores": 2, "cpu": "test CPU", "cpu_flags": ["avx2", "fma"],
}  # fmt: skip


def _row(name: str, size: str, ours: float, peer: float) -> _bench.Row:
    (case,) = [c for c in _bench.CASES if c.name == name]
    times = {_bench.OURS: ours, _bench.NUMPY: peer}
    row = _bench.Row(case, size, times=times, status=dict.fromkeys(times, "ok"))
    row.quartiles = {n: (t * 0.9, t * 1.2) for n, t in times.items()}
    return row


# speed-ups 1 / 0.86 and 0.86, and others far from 1 both ways
ROWS = [
    _row("matmul-f16-1024", "quick", 1e-3, 0.86e-3),
    _row("matmul-i32-512", "quick", 0.86e-3, 1e-3),
    _row("pow-f32-e3.7", "quick", 2e-3, 60e-3),
    _row("pow-f32-e2", "quick", 10e-3, 0.7e-3),
]


def _boxes(fig, texts):
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in texts if t.get_visible() and t.get_text()]


def _assert_apart(boxes):
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)


def _drawn(axis):
    """The tick labels of ``axis`` within its view (matplotlib keeps some beyond it, undrawn)."""
    lo, hi = sorted(axis.get_view_interval())
    return [
        t for t in axis.get_ticklabels() if lo <= t.get_position()[axis is axis.axes.yaxis] <= hi
    ]


def _assert_readable(fig):
    """No two tick labels of an axis overlap, nor any titles, legends cover no axes, and all
    of it lies within the figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    titles = [fig._suptitle] if fig._suptitle else []
    texts = list(titles)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            _assert_apart(_boxes(fig, _drawn(axis)))
            texts += [*_drawn(axis), axis.label]
        titles.append(ax.title)
        texts.append(ax.title)
    _assert_apart(_boxes(fig, titles))
    for legend in fig.legends:
        for ax in fig.axes:
            assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    inside = fig.bbox.padded(1)
    for box in _boxes(fig, texts) + [legend.get_window_extent(renderer) for legend in fig.legends]:
        assert inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1), box


@pytest.fixture
def draw(monkeypatch, tmp_path):
    """``bench.plot`` to a PNG, returning the figure it saved (kept open until the end)."""
    from matplotlib.figure import Figure

    figures = []
    save = Figure.savefig

    def keep(fig, *args, **kwargs):
        figures.append(fig)
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    monkeypatch.setattr(plt, "close", lambda *args: None)

    def draw(rows, env=ENV, **kwargs):
        _bench.plot(rows, str(tmp_path / "bench.png"), env, **kwargs)
        assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        return figures[-1]

    yield draw
    monkeypatch.undo()
    for fig in figures:
        plt.close(fig)


def test_speed_ups_are_bars_from_1_on_a_log_axis_centred_on_1(draw):
    fig = draw(ROWS, ENV)
    _, ax = fig.axes
    assert ax.get_xscale() == "log"
    lo, hi = ax.get_xlim()
    assert lo * hi == pytest.approx(1.0) and hi >= 2
    bars = ax.patches
    assert len(bars) == len(ROWS)
    for bar, row in zip(bars, ROWS, strict=True):
        assert bar.get_x() == 1.0
        assert bar.get_x() + bar.get_width() == pytest.approx(row.ratio)
    # A loss and a win by the same factor draw equally long bars.
    win, loss = (ax.transData.transform([(1.0, 0.0), (r.ratio, 0.0)])[:, 0] for r in ROWS[:2])
    assert abs(np.diff(win)[0]) == pytest.approx(abs(np.diff(loss)[0]))
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_visible()]
    assert "1" in labels and all(float(t) > 0 for t in labels)
    _assert_readable(fig)


@pytest.mark.parametrize("ratios", [[1.01], [0.02, 0.5], [300.0, 0.5], [1.2, 1.16, 1.1]])
def test_speed_up_axis_keeps_1_in_the_middle_whatever_the_range(draw, ratios):
    names = ["matmul-f32-1024", "matmul-f32-256", "matmul-i32-512"]
    fig = draw([_row(n, "full", 1e-3, 1e-3 * r) for n, r in zip(names, ratios)])
    _, ax = fig.axes
    lo, hi = ax.get_xlim()
    assert lo * hi == pytest.approx(1.0) and hi >= max(max(r, 1 / r) for r in ratios)
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert 1.0 in ticks and 3 <= len(ticks) <= 11
    assert np.allclose(sorted(1 / t for t in ticks), ticks)  # as many steps each way
    lo, hi = fig.axes[0].get_xlim()
    assert len([t for t in fig.axes[0].get_xticks() if lo <= t <= hi]) >= 2  # times read off
    _assert_readable(fig)


def test_case_labels_give_the_inputs_actually_run(draw):
    labels = [t.get_text() for t in draw(ROWS).axes[0].get_yticklabels()]
    assert labels == [row.case.label("quick") for row in ROWS]
    assert "256" in labels[0] and "1024" not in labels[0]  # matmul-f16-1024 under --quick
    tiny = [_row(name, "tiny", 1e-6, 1e-6) for name in ("matmul-f32-1024", "matmul-f32-256")]
    labels = [t.get_text() for t in draw(tiny).axes[0].get_yticklabels()]
    assert len(set(labels)) == 2 and all("(7,7)" in label for label in labels)


@pytest.mark.parametrize("size", ["full", "tiny"])
def test_models_in_the_evaluator_fit_and_the_legend_names_their_peer(draw, size):
    # the longest labels of the comparison (with the case's name under --size tiny)
    rows = [_row("model-f32-b1024-w1024", size, 1e-3, 20e-3),
            _row("model-eval-f32-b1024-w1024", size, 5e-3, 2e-3)]  # fmt: skip
    fig = draw(rows, targets=True)
    assert "ReferenceEvaluator" in fig.axes[0].get_yticklabels()[1].get_text()
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "numpy (ReferenceEvaluator rows: the evaluator alone)" in legend
    _assert_readable(fig)


def test_time_axis_times_have_units_and_whiskers(draw):
    fig = draw(ROWS, ENV, targets=True, warnings=["the copy took 2 ms before and 11 after"])
    ax_t, ax_r = fig.axes
    assert ax_t.get_xscale() == "log"
    lo, hi = ax_t.get_xlim()
    labels = [t.get_text() for t in ax_t.get_xticklabels() if lo <= t.get_position()[0] <= hi]
    assert len(labels) >= 3 and all(label.endswith((" us", " ms")) for label in labels)
    assert not ax_t.xaxis.get_minorticklabels() or not any(
        t.get_text() for t in ax_t.xaxis.get_minorticklabels()
    )
    bars = [c for c in ax_t.containers if isinstance(c, BarContainer)]
    assert bars and all(c.errorbar is not None for c in bars)  # the spread of each median
    assert "WARNING" in fig._suptitle.get_text()
    targets = [c for c in ax_r.collections if c.get_label() == "target"]
    assert targets and ax_r.get_xlim()[1] >= max(r.case.target for r in ROWS)
    _assert_readable(fig)


def test_plot_checks_the_file_type_before_a_run(tmp_path):
    assert _bench.plot_path_problem(str(tmp_path / "x.png")) is None
    assert "cannot write .xyz" in _bench.plot_path_problem(str(tmp_path / "x.xyz"))


# --------------------------------------------------------------------------------------------
# The notebooks' pictures, drawn from their cells with made-up inputs


def _picture_cell(notebook: str, marker: str) -> str:
    cells = json.loads((EXAMPLES / notebook).read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells if marker in "".join(c["source"])]
    return source


def _draw_cell(source: str, monkeypatch, **names):
    shown = []
    monkeypatch.setattr(plt, "show", lambda: shown.append(plt.gcf()))
    exec(source, {"np": np, **names})
    (fig,) = shown
    return fig


def test_quickstart_accuracy_titles_tell_a_maximum_from_half_an_ulp(monkeypatch):
    source = _picture_cell("quickstart.ipynb", "ax.hist(err")
    errors = {
        "numba_onnx_ops": np.array([0.1, 0.49996]),
        "numpy": np.array([0.2, 0.501]),
        "onnxruntime": np.array([0.5, 0.25]),
        "other": np.array([0.3, 1.25]),
    }
    fig = _draw_cell(source, monkeypatch, errors=errors, k=2)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "numba_onnx_ops: max 0.49996 ulp",
        "numpy: max 0.501 ulp",
        "onnxruntime: max 0.50 ulp",
        "other: max 1.25 ulp",
    ]
    _assert_readable(fig)
    plt.close(fig)


def test_scaleout_picture_shows_memory_against_the_data_streamed(monkeypatch):
    source = _picture_cell("scaleout.ipynb", "resident memory of this process")
    seconds = np.linspace(0, 2, 50)
    samples = [(t, (300 + 40 * min(t, 1)) * 2**20, t / 2) for t in seconds]
    x16 = SimpleNamespace(nbytes=256 * 2**20)
    fig = _draw_cell(source, monkeypatch, samples=samples, x16=x16)
    (ax,) = fig.axes
    lines = {line.get_label().split()[0]: line for line in ax.get_lines()}
    assert np.allclose(lines["resident"].get_ydata(), [40 * min(t, 1) for t in seconds])
    assert np.allclose(lines["MiB"].get_ydata(), 128 * seconds)  # "MiB written so far"
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 256
    assert ax.get_xlim() == (0, 2)
    assert "256 MiB through" in ax.get_title() and "at most 40 MiB" in ax.get_title()
    _assert_readable(fig)
    plt.close(fig)
