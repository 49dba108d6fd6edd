import pytest

from schedules import StageCosts, generate, simulate
from schedules.formats.gantt import COLORS, _lighter, draw_gantt, draw_gantts, draw_memory


def test_gantt_and_memory_files(tmp_path):
    costs = StageCosts.uniform(3, 1, 2, 1, act_bytes=1.0, host_bandwidth=2.0)
    tl = simulate(generate("obscura", 3, 6, adjusted=0, swap_blocks=1, swap_fraction=1.0), costs)
    files = draw_gantt(tl, tmp_path / "a.png", title="x") + draw_memory(tl, tmp_path / "m.png", svg=False)
    files += draw_gantts([tl, tl], tmp_path / "b.png", svg=False, same_scale=False)
    assert [f.name for f in files] == ["a.png", "a.svg", "m.png", "b.png"]
    assert all(f.stat().st_size > 1000 for f in files)
    svg = (tmp_path / "a.svg").read_text()
    assert ">makespan 25 cost units: x<" in svg     # the title as text, not glyph paths
    with pytest.raises(ValueError):
        draw_gantts([], tmp_path / "c.png")


def test_gantt_of_chunks_and_split_backwards(tmp_path):
    costs = StageCosts.uniform(8, 0.5, 1.0, 0.25, act_bytes=1.0)
    tl = simulate(generate("obscura-interleaved", 4, 8, adjusted=1, costs=costs), costs)
    zb = simulate(generate("zb-v", 4, 8), costs)
    files = draw_gantts([tl, zb], tmp_path / "z.png", ["interleaved", "zb-v"])
    svg = (tmp_path / "z.svg").read_text()
    assert all(f.stat().st_size > 1000 for f in files)
    assert "device 0 (stages 0,4)" in svg and "device 0 (stages 0,7)" in svg
    assert "input grad" in svg and "weight grad" in svg and "3/5" in svg     # micro-batch/stage labels
    assert _lighter(COLORS["F"], 0) == COLORS["F"] and _lighter(COLORS["F"], 1) != COLORS["F"]
    assert COLORS["I"] not in (COLORS["B"], COLORS["W"])


def test_the_time_axis_says_its_unit(tmp_path):
    costs = StageCosts.uniform(2, 1, 2, 1)
    tl = simulate(generate("1f1b", 2, 2), costs)
    draw_gantt(tl, tmp_path / "u.png")
    assert "time (cost units)" in (tmp_path / "u.svg").read_text() and "makespan 9 cost units" in (tmp_path / "u.svg").read_text()
    seconds = simulate(generate("1f1b", 2, 2), StageCosts.uniform(2, 0.001, 0.002, 0.001))
    draw_gantt(seconds, tmp_path / "ms.png", time_unit="s")
    draw_memory(seconds, tmp_path / "mem.png", time_unit="s")
    for name in ("ms.svg", "mem.svg"):
        svg = (tmp_path / name).read_text()
        assert "time (ms)" in svg and "makespan 9.0 ms" in svg
    long = simulate(generate("1f1b", 2, 2), StageCosts.uniform(2, 1, 2, 1))
    draw_gantt(long, tmp_path / "s.png", time_unit="s")
    assert "time (s)" in (tmp_path / "s.svg").read_text()


def test_an_iteration_ends_with_its_optimizer_step(tmp_path):
    """A timeline with its optimizer step: the chart spans the iteration, draws the
    step on every device and its title gives the iteration time; the bubble counts
    the idle time up to the iteration's end over devices x iteration time."""
    costs = StageCosts.uniform(2, 0.001, 0.002, 0.001).with_(optimizer=(0.0005, 0.00025))
    plain = simulate(generate("1f1b", 2, 2), costs)
    tl = plain.with_optimizer([0.0005, 0.00025])
    assert tl.iteration_time == pytest.approx(0.0095) and tl.optimizer.start == plain.makespan
    idle = plain.stages[0].idle + plain.stages[1].idle + 0.00025      # device 1 steps for half as long
    assert tl.bubble_fraction == pytest.approx(idle / (2 * 0.0095))
    assert plain.with_optimizer(0.0).bubble_fraction == pytest.approx(plain.bubble_fraction)
    draw_gantt(tl, tmp_path / "o.png", title="run", time_unit="s")
    svg = (tmp_path / "o.svg").read_text()
    assert ">iteration 9.5 ms (optimizer step included): run<" in svg and "optimizer step" in svg
    bars = _bar_collections(tl)
    opt = [c for c in bars if tuple(c.get_facecolor()[0][:3]) == tuple(int(COLORS["OPT"][i:i + 2], 16) / 255
                                                                      for i in (1, 3, 5))]
    assert [len(c.get_paths()) for c in opt] == [1, 1]          # one bar on each device
    # a measured step: the step's wall time ends the iteration, its optimizer step before it
    measured = plain.with_optimizer(0.0004, end=0.0100)
    assert measured.optimizer.start == pytest.approx(0.0096) and measured.iteration_time == pytest.approx(0.0100)


def _bar_collections(timeline):
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure

    from schedules.formats.gantt import _draw
    ax = Figure().subplots()
    _draw(ax, timeline, None, timeline.iteration_time)
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_bars_are_one_collection_per_colour_and_band_not_one_per_op():
    # drawing cost grows with matplotlib artists: 32 micro-batches draw as many collections as 4
    costs = StageCosts.uniform(4, 1, 2, 0.5)
    small, large = (simulate(generate("obscura", 4, m, adjusted=1), costs) for m in (4, 32))
    assert len(_bar_collections(small)) == len(_bar_collections(large)) <= 4 * 6
    # every bar is still drawn: ops, their recompute parts and the idle intervals
    from schedules.timeline import idle_intervals
    bars = sum(len(c.get_paths()) for c in _bar_collections(large))
    want = sum(len(large.device_ops(d)) + sum(o.recompute > 0 for o in large.device_ops(d))
               + len(idle_intervals(large.device_ops(d), large.makespan)) for d in range(4))
    assert bars == want


def test_saving_draws_the_figure_once_per_file(tmp_path, monkeypatch):
    # the panels' frames are computed; a layout engine on the figure would make every
    # savefig draw it twice (once to lay out, once to the file)
    from matplotlib.figure import Figure
    draws = []
    real = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: draws.append(1) or real(self, renderer))
    tl = simulate(generate("1f1b", 2, 2), StageCosts.uniform(2, 1, 2, 1))
    draw_gantt(tl, tmp_path / "once.png")
    assert len(draws) == 2     # one per file (PNG, SVG)


def test_the_computed_frames_keep_every_label_inside_the_figure_and_the_panels_apart(tmp_path, monkeypatch):
    """No layout pass: the row labels (the longest: a device's stages), titles and time
    axes of stacked panels fit in the figure, and no panel's labels reach into the next."""
    from matplotlib.figure import Figure
    figures = []
    real = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self) or real(self, *a, **k))
    costs = StageCosts.uniform(8, 0.5, 1.0, 0.25)
    one = simulate(generate("1f1b", 4, 8), StageCosts.uniform(4, 1, 2, 1))
    draw_gantts([simulate(generate("interleaved", 4, 8), costs), one, one], tmp_path / "f.png", svg=False)
    fig = figures[0]
    renderer = fig.canvas.get_renderer()
    frame = fig.bbox
    extents = [ax.get_tightbbox(renderer) for ax in fig.axes]
    assert len(extents) == 3
    for extent in extents:
        assert frame.x0 <= extent.x0 and extent.x1 <= frame.x1 + 1 and frame.y0 <= extent.y0 and extent.y1 <= frame.y1
    for upper, lower in zip(extents, extents[1:]):
        assert lower.y1 <= upper.y0      # display y grows upwards: the next panel sits below
    legend = fig.legends[0].get_window_extent(renderer)
    assert extents[0].y1 <= legend.y0
