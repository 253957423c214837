"""The sweep's PNGs: ticks from ``export.ticks`` on every axis, the y range fitted to the data and said so, the
legend outside the plot area, and titles and axes that say which tok/s they plot."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import pytest

from specwatch.export import sweep_plots
from specwatch.results import BenchResult, ClientLag, ConfigResult, LevelResult, Spread


def bench(tps: float, decode_tps: float, accept: float | None) -> BenchResult:
    return BenchResult(4, 4, tps, tps, tps, tps, decode_tps, {"ttft": Spread(0.01, 0.02, 0.03, 0.015)},
                       Spread(mean=2.0), accept, None, None, 40 if accept else 0, (0.7, 0.4), {"ok": 4, "timeout": 0},
                       {}, 0, None, ClientLag(intervals=3))


def config(label: str, steps: int, tps: float, accept: float | None) -> ConfigResult:
    lvl = LevelResult(bench(tps, tps, accept), ())
    return ConfigResult(label, {"steps": str(steps)} if steps else {}, 1.7e9, "ok", 1.7e9 + 60, steps=steps,
                        draft_tokens=steps + 1, results=lvl.results, runs=lvl.runs,
                        by_concurrency={1: lvl, 4: dataclasses.replace(lvl, results=bench(tps * 3, tps * 0.75,
                                                                                          accept))})


RESULTS = [config("baseline", 0, 75.0, None), config("steps=1", 1, 80.0, 1.8), config("steps=2", 2, 92.0, 2.6),
           config("steps=5", 5, 67.0, 3.2)]


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """The figure and title each plot would save."""
    seen: list[tuple[object, str, str]] = []
    monkeypatch.setattr(sweep_plots, "_save", lambda fig, _plt, _path, title, legend: seen.append((fig, title, legend)))
    yield seen
    for fig, _, _ in seen:
        plt.close(fig)


def labels(ticks) -> list[str]:
    return [t.get_text() for t in ticks]


def test_sweep_png_ticks_fit_the_data_and_say_aggregate(drawn, tmp_path):
    assert sweep_plots.plot(tmp_path / "sweep.png", RESULTS, 75.0) == f"plot: {tmp_path / 'sweep.png'}"
    (fig, title, legend), = drawn
    ax, ax2 = fig.axes
    assert labels(ax.get_xticklabels()) == ["1", "2", "3", "4", "5"]
    assert labels(ax.get_yticklabels()) == ["65", "70", "75", "80", "85", "90", "95"]  # data 67-92, not from 0
    assert ax.get_ylim() == (65.0, 95.0) and "not from 0" in ax.get_ylabel()
    assert ax.get_ylabel().startswith("aggregate output tok/s (all streams)")
    assert labels(ax2.get_yticklabels()) == ["1.5", "2.0", "2.5", "3.0", "3.5"]
    assert "Aggregate output tok/s (all streams, 1 stream in flight)" in title and legend.startswith("outside")


def test_sweep_load_png_says_per_stream_decode_and_ticks_powers_of_two(drawn, tmp_path):
    sweep_plots.plot_load(tmp_path / "sweep-load.png", RESULTS)
    (fig, title, legend), = drawn
    (ax,) = fig.axes
    assert labels(ax.get_xticklabels()) == ["1", "2", "4"]
    assert labels(ax.get_yticklabels()) == ["40", "50", "60", "70", "80", "90", "100"]  # data 50-92
    assert ax.get_ylabel() == "per-stream decode tok/s\n(axis from 40 to 100, not from 0)"
    assert title.startswith("Per-stream decode tok/s by concurrency")
    assert legend == "outside right upper"


def test_report_chart_names_the_aggregate_and_ticks_the_steps():
    svg = sweep_plots.steps_chart(RESULTS, 75.0)
    assert sweep_plots.STEPS_TITLE in svg and svg.count('class="pt"') == 3
    assert svg.count('class="xtick"') == 5 and 'class="ytick">95<' in svg and "plain decoding 75.0" in svg
