"""One unit and one interval notation for every effect cpbench prints: the share of the two-call
(base) time the fused (new) path saves, signed, in percent, its 95 % interval in brackets in the same unit
(``+0.7 % [+0.1, +1.4]``), in the report, the console, ``compare`` and the charts."""

import math
import re

import numpy as np
import pandas as pd
from rich.console import Console

from cpbench.cli.sweep import show_summary
from cpbench.report.data import cells, prepare
from cpbench.report.tables import forward_text
from cpbench.report.run_report import render_report
from cpbench.report.units import EFFECT_UNIT
from cpbench.results.verdicts import effect_text, saved_share, verdict_text
from runfactory import default_latency, make_rows, manifest

NAN = math.nan


def test_an_effect_is_the_share_of_the_base_time_saved_with_its_interval_in_the_same_unit():
    assert effect_text(1.25) == "+20.0 %" and effect_text(0.8) == "−25.0 %" and effect_text(2.0) == "+50.0 %"
    assert math.isclose(saved_share(1.25), 0.2) and math.isnan(saved_share(0)) and math.isnan(saved_share(NAN))
    # the interval maps end to end (1 − 1/x is monotonic), in the same unit, after a comma
    assert effect_text(1.007, 1.001, 1.0142) == "+0.7 % [+0.1, +1.4]"
    assert effect_text(0.98, 0.96, 1.01) == "−2.0 % [−4.2, +1.0]"
    # an interval that excludes 0 never prints an end as 0: decimals are added until it does not
    assert effect_text(1.004, 1.0004, 1.008) == "+0.40 % [+0.04, +0.79]"
    assert effect_text(NAN) == "—" and effect_text(-1.0) == "—" and effect_text(1.25, NAN, 1.3) == "+20.0 %"
    assert verdict_text(1.007, 1.001, 1.0142) == "faster +0.7 % [+0.1, +1.4]"
    assert verdict_text(0.98, 0.96, 1.01) == "tie −2.0 % [−4.2, +1.0]" and verdict_text(0.5, 0.45, 0.55).startswith(
        "slower −100.0 % [")


def test_the_forward_column_uses_the_same_notation_as_every_other():
    c = pd.Series({"status": "ok", "speedup": 1.007, "speedup_ci_low": 1.001, "speedup_ci_high": 1.0142,
                   "two_call_us": 32050.0, "fused_us": 31826.0, "host_hidden": True})
    assert forward_text(c) == "faster +0.7 % [+0.1, +1.4] (saves 0.22 ms of 32.05 ms)"
    tie = c.copy()
    tie.update({"speedup": 0.998, "speedup_ci_low": 0.994, "speedup_ci_high": 1.003, "fused_us": 32114.0})
    assert forward_text(tie) == "tie −0.2 % [−0.6, +0.3] (costs 0.06 ms of 32.05 ms)"


def quarter_faster(*a):
    """Fused takes 0.8 of the two-call time on every rank: it saves 20.0 % (a speedup of 1.25)."""
    return default_latency(*a[:-1], "two-call") * (0.8 if a[-1] == "fused" else 1.0)


def rows():
    return pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1, 4), seqs=(1024,), timings=("eager",),
                                  latency=quarter_faster, noise=0))


def test_the_report_prints_every_fused_effect_in_one_unit():
    text = render_report(rows(), manifest(), "run")
    one = "+20.0 % [+20.0, +20.0]"
    assert "| 2 | 1 | 1K | eager | faster +20.0 % [+20.0, +20.0] |" in text  # the per-backend answer
    assert f"| {EFFECT_UNIT} [95% CI] |" in text and f"| 1 | 1K | " in text and one in text  # results per cp size
    assert "| 1 | faster +20.0 % [+20.0, +20.0] |" in text  # when to fuse
    assert "fused saves a median +20.0 % of the two-call time, best +20.0 % at" in text  # the summary
    assert text.count("1.25") == 1  # the reading guide's example: no effect is printed as a ratio
    guide = text.split("## Summary", 1)[1]
    assert "`+0.7 % [+0.1, +1.4]`" in guide and "1.25× is +20.0 %" in guide  # the reading guide states the unit


def test_the_console_prints_the_reports_notation():
    console = Console(width=200, record=True)
    show_summary(console, rows())
    out = console.export_text()
    assert "fused saves, % of two-call time [95% CI]" in " ".join(out.split())
    assert len(re.findall(r" \+20\.0 % \[\+20\.0, \+20\.0\] │ faster", out)) == 2 and "×" not in out


def test_compare_prints_new_against_base_in_the_same_unit(tmp_path):
    from cpbench.report.compare_md import compare_markdown
    from cpbench.results.compare import compare_frames

    base = rows()
    new = pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1, 4), seqs=(1024,), timings=("eager",), noise=0,
                                 latency=lambda *a: 0.8 * quarter_faster(*a)))
    text = compare_markdown(compare_frames(base, new), "base", "new", manifest(), manifest())
    row = next(ln for ln in text.splitlines() if ln.startswith("| eager | 2 | 1 | 1024 | 0 | 0 | two-call |"))
    assert row.endswith("| +20.0 % [+20.0, +20.0] | **faster** |")  # new takes 0.8 of base: it saves 20.0 %
    assert "new saves, % of base time [95% CI]" in text and "geometric mean +20.0 %;" in text
    assert "| eager | 2 | 1 | 1024 | 0 | +20.0 % [+20.0, +20.0] | faster | +20.0 % [+20.0, +20.0] | faster |" in text
    assert "×" not in text and "0.800" not in text


def test_the_charts_draw_and_label_the_effect_in_its_unit(tmp_path, monkeypatch):
    from cpbench.report import style
    from cpbench.report.latency import speedup_heatmap
    from cpbench.report.segments import segments_chart

    figs = []
    monkeypatch.setattr(style, "save", lambda fig, out_dir, name: figs.append(fig) or [])
    d = prepare(rows())
    speedup_heatmap(d, tmp_path, "speedup", "t")
    bar = figs[-1].axes[-1]
    assert bar.get_ylabel() == f"{EFFECT_UNIT} (blue: fused faster)"
    ticks = [t.get_text() for t in bar.get_yticklabels()]
    assert "0" in ticks and "+20 %" in ticks and all(t == "0" or t.endswith(" %") for t in ticks)
    assert {t.get_text() for t in figs[-1].axes[0].texts} == {"+20.0 %"}
    three = prepare(pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1, 4, 16), seqs=(1024,), timings=("graph",),
                                           latency=quarter_faster, noise=0)))
    segments_chart(three, tmp_path, "segments", "t")
    left = figs[-1].axes[0]
    assert left.get_ylabel() == EFFECT_UNIT
    ys = np.concatenate([c.lines[0].get_ydata() for c in left.containers])
    assert np.allclose(ys, 20.0)  # a speedup of 1.25 drawn as the 20 % of the two-call time it saves
    assert len(cells(three)) == 3
