"""`cpbench sweep` with a trace, a length mix, a prefix hit and --tp, end to end on CPU (tiny model), and
per-layer-kind times."""

import json
import math

import pandas as pd
import pytest

from cpbench.domain.flops import forward_flops
from cpbench.domain.geometry import rank_geometry
from cpbench.measure.layer_kinds import has_both_kinds, layer_kind_sums
from cpbench.domain.models import get_preset, with_overrides
from cpbench.results.store import load_run
from cpbench.domain.tp import split_heads
from clirun import cpbench, replacing

# gpt-oss-120b's pattern on 2 layers (window 128, full), 8 q / 2 kv heads before --tp
TINY = ["--layers", "2", "--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--page-size", "16", "--budget-ms", "5",
        "--timing", "eager"]


def test_trace_gives_its_batches_and_the_share_run_with_cp(tmp_path, text_reports):
    trace = tmp_path / "trace.csv"
    # input_len,cached_len -> extend: 16, 3 | 32, 12 | 8  (cp 2: CP needs every extend >= 4)
    trace.write_text("input_len,cached_len\n20,4\n10,7\n40,8\n12,0\n9,1\n")
    out = tmp_path / "r"
    r = cpbench("sweep", "--device", "cpu", "--cp", "2", "--bs", "2", "--trace", str(trace), "--tp", "2",
                "--out", str(out), *TINY)
    assert r.returncode == 0, r.stdout[-800:] + r.stderr[-800:]
    df, manifest = load_run(out)
    cells = df.drop_duplicates("batch").sort_values("batch")
    assert list(cells["extend_lens"]) == ["16,3", "32,12", "8"]
    assert list(cells["prefix_lens"]) == ["4,7", "8,0", "1"]
    assert list(cells["prefix_len"]) == [7, 8, 1] and list(cells["max_extend_len"]) == [16, 32, 8]
    assert list(cells["bs"]) == [2, 2, 1] and set(df["tp_size"]) == {2}
    assert set(df.loc[df["batch"] == 0, "status"]) == {"ineligible"}
    assert set(df.loc[df["batch"] > 0, "status"]) == {"ok"}
    assert len(df) == 3 * 2 * 2  # batches x ranks x modes
    assert manifest["config"]["model"]["num_q_heads"] == 4 and manifest["config"]["model"]["num_kv_heads"] == 1
    # KV lengths, page tables and FLOPs follow the prefixes: batch 1 is extend (32, 12) + prefix (8, 0)
    b1 = df[(df["batch"] == 1) & (df["rank"] == 0) & (df["mode"] == "fused")].iloc[0]
    assert b1["context_len"] == 40 and b1["max_kv_len"] == 40  # rank 0's next block ends request 0: 8 + 32
    assert b1["page_table_bytes"] == 2 * 3 * 4  # [bs 2, ceil(40 / 16) pages] int32
    model = split_heads(with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=8, kv_heads=2, head_dim=16,
                                       page_size=16), 2)
    assert b1["flops"] == forward_flops(model, rank_geometry((32, 12), (8, 0), 2, 0))
    report = (out / "report.md").read_text()
    assert "3 of 5 requests (60 %) in 2 of 3 batch(es) ran with CP" in report
    # a CPU report makes no speedup claim: no when-to-fuse or layer-kind verdicts (a GPU run's report has them)
    assert "## When to fuse" not in report and "## By layer kind" not in report
    from cpbench.report.run_report import render_report
    as_gpu = render_report(df, {**manifest, "device": "cuda:0", "config": {**manifest["config"], "device": "cuda:0"}}, "r")
    assert "## When to fuse" in as_gpu and "tp 2 · cp 2" in as_gpu
    # per-layer-kind times are GPU kernel time: a CPU run leaves them out (its profiled host times carry the
    # profiler's own cost), and a report shows no layer-kind table without them
    assert "window_layers_us" not in df or df["window_layers_us"].isna().all()
    assert "## By layer kind" not in as_gpu


def test_lognormal_mix_with_prefix_hits_is_reproducible(tmp_path):
    def run(name, seed):
        out = tmp_path / name
        r = cpbench("sweep", "--device", "cpu", "--cp", "2", "--bs", "1,2", "--lengths", "dist:lognormal:24:0.5",
                    "--batches", "2", "--prefix-hit", "0.25", "--seed", str(seed), "--mode", "fused", "--no-check",
                    "--no-profile", "--no-report", "--out", str(out), *TINY)
        assert r.returncode == 0, r.stdout[-800:] + r.stderr[-800:]
        df, manifest = load_run(out)
        return manifest["config"]["batches"], df

    a, df = run("a", 3)
    assert a == run("b", 3)[0] and a != run("c", 4)[0]
    assert [len(e) for e, _ in a] == [1, 1, 2, 2]
    for ext, pre in a:  # prefix = floor(0.25 * prompt), extend = prompt - prefix
        assert all(p == math.floor(0.25 * (e + p)) for e, p in zip(ext, pre))
    assert sorted(set(df["batch"])) == [0, 1, 2, 3]


def test_window_model_only_has_per_kind_times(tmp_path):
    out = tmp_path / "full"
    r = cpbench("sweep", "--device", "cpu", "--cp", "2", "--bs", "1", "--seq", "16", "--window", "0", "--no-report",
                "--out", str(out), *TINY)
    assert r.returncode == 0, r.stderr[-800:]
    df, _ = load_run(out)
    assert "window_layers_us" not in df or df["window_layers_us"].isna().all()


@pytest.mark.parametrize("args,needle", [
    (["--lengths", "10,20", "--trace", "t.csv"], "keep one"),
    (["--lengths", "10,20", "--seq", "32"], "--extend-len and --extend-lens do not apply"),
    (["--prefix-hit", "0.5", "--prefix", "8"], "keep one"),
    (["--prefix-hit", "1.5"], "--prefix-hit must be a fraction in [0, 1)"),
    (["--batches", "2"], "--batches applies to --lengths or --trace"),
    (["--batches", "2", "--prefix-hit", "0.5"], "--batches applies to --lengths or --trace"),
    (["--lengths", "dist:gamma:1:2"], "unknown distribution 'gamma'"),
    (["--tp", "16"], "--tp 16 does not divide the model's 8 query heads"),
])
def test_bad_workload_options_exit_2(tmp_path, args, needle):
    r = cpbench("sweep", "--device", "cpu", "--out", str(tmp_path / "r"), "--no-report", *TINY, *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and needle in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_layer_kind_sums_each_kind():
    """Layers 0, 2 slide (window_left 127), 1, 3 are full: the per-kind sums are exact, and a profile that
    lost a layer gives no partial sum."""
    layer_us = {0: 10.0, 1: 20.0, 2: 30.0, 3: 45.0}
    assert layer_kind_sums(layer_us, (127, -1, 127, -1)) == {"window_layers_us": 40.0, "full_layers_us": 65.0}
    assert has_both_kinds((127, -1)) and not has_both_kinds((-1, -1)) and not has_both_kinds((127, 127))
    with pytest.raises(ValueError, match="per-layer times for 3 layers, the model has 4"):
        layer_kind_sums({0: 1.0, 1: 2.0, 3: 4.0}, (127, -1, 127, -1))


def test_resume_keeps_the_batches_and_tp(tmp_path):
    args = ["sweep", "--device", "cpu", "--cp", "2", "--bs", "2", "--lengths", "dist:uniform:8:24", "--batches", "1",
            "--mode", "fused", "--no-check", "--no-profile", "--no-report", "--out", str(tmp_path / "r"), *TINY]
    assert cpbench(*args).returncode == 0
    rows = (tmp_path / "r" / "results.jsonl").read_text().splitlines()
    again = cpbench(*args, "--resume")
    assert again.returncode == 0 and (tmp_path / "r" / "results.jsonl").read_text().splitlines() == rows
    tp = cpbench(*args, "--resume", "--tp", "2")
    assert tp.returncode == 2 and "measured with --tp 1, not --tp 2:" in tp.stderr
    other = cpbench(*args, "--resume", "--seed", "1")  # another seed draws other lengths
    assert other.returncode == 2 and "measured with --seed 0, not --seed 1:" in other.stderr
    more = cpbench(*replacing(args, "--batches", "2"), "--resume")  # two drawn batches, not one
    assert more.returncode == 2 and len(more.stderr.strip().splitlines()) == 1, more.stderr
    assert ("other request batches (1 batch of 2 requests in all; this sweep plans 2 batches of 4 requests in all), "
            "which come from --bs/--seq/--extend-lens/--lengths/--trace/--batches/--prefix-hit") in more.stderr


def test_prefix_hit_on_the_grid(tmp_path):
    out = tmp_path / "g"
    r = cpbench("sweep", "--device", "cpu", "--cp", "2", "--bs", "1,2", "--seq", "64", "--prefix-hit", "0.25",
                "--mode", "fused", "--no-check", "--no-profile", "--no-report", "--out", str(out), *TINY)
    assert r.returncode == 0, r.stderr[-800:]
    df, manifest = load_run(out)
    assert manifest["config"]["batches"] == [[[48], [16]], [[48, 48], [16, 16]]]
    cells = df.drop_duplicates("batch").sort_values("batch")
    assert list(cells["extend_lens"]) == ["48", "48,48"] and list(cells["prefix_len"]) == [16, 16]
    assert list(cells["max_extend_len"]) == [48, 48] and list(cells["context_len"]) == [64, 64]
