"""``cpbench profile --from``: an engine's traces read without a GPU (hand-built kineto traces with known
contents, real traces from another project, and bad input)."""

import gzip
import json
from pathlib import Path

import pytest

import tracefactory as tf
from clirun import cpbench
from runfactory import make_rows, write_run
from cpbench.studies.engine_traces.forwards import find_forwards, layer_times, matching_ranges, range_members
from cpbench.studies.engine_traces.traces import read_torch_trace, read_traces
from cpbench.studies.engine_traces.verdict import CpEvidence, verdict

HTA = Path(__file__).parent / "fixtures" / "hta"
FMHA = {"trtllm-fmha-v2": ("fmha_v2_flash_attention",)}


def from_json(*args):
    r = cpbench("profile", "--from", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("per_layer,count,path", [(1, 36, "fused path taken"), (2, 72, "two-call")])
def test_verdict_and_layer_times_per_rank(tmp_path, per_layer, count, path):
    tf.write_run(tmp_path, world_size=4, layers=36, per_layer=per_layer, forwards=3, window_us=12.0, full_us=40.0)
    out = from_json(tmp_path, "--model", "gpt-oss-120b", "--cp", "4")
    assert [r["rank"] for r in out["ranks"]] == [0, 1, 2, 3]
    for r in out["ranks"]:
        assert r["backend"] == "trtllm-fmha-v2" and r["bound"] == "annotation" and r["forwards"] == 3
        assert r["attention_kernels_per_forward"] == [count] * 3
        assert r["verdict"] == f"{path}: {count} attention kernels per forward ({per_layer} per layer; CP: --cp 4)"
        times = {t["kind"]: t for t in r["layer_times_us"]}
        assert times["window"]["median"] == pytest.approx(12.0) and times["window"]["layers"] == 18 * 3
        assert times["full"]["median"] == pytest.approx(40.0) and times["full"]["p90"] == pytest.approx(40.0)
        assert r["kernel_kinds"] == {"other": 36 * 2 * 3, "attention": count * 3, "fill": count * 3}


def test_forwards_from_the_layer_count_without_annotations(tmp_path):
    tf.write(tmp_path / "r0.json", gz=False, layers=4, per_layer=2, forwards=3, annotate=False,
             extra=[tf.ATTN.format(""), tf.GEMM, tf.ATTN.format("")])
    out = from_json(tmp_path / "r0.json", "--layers", "4", "--cp", "2")
    (r,) = out["ranks"]
    assert r["bound"] == "layer count" and r["attention_kernels_per_forward"] == [8, 8, 8]
    assert r["leftover_layers"] == 2  # the two extra attention kernels after the last forward, apart
    assert "two-call: 8" in r["verdict"]
    console = cpbench("profile", "--from", tmp_path / "r0.json", "--layers", "4")
    assert "2 attention layers after the last whole forward were not counted" in console.stdout


def test_unknown_kernels_are_listed_by_name_with_their_count(tmp_path):
    tf.write(tmp_path / "r0.json.gz", layers=2, extra=["my_fused_moe_kernel"] * 3)
    out = from_json(tmp_path / "r0.json.gz", "--layers", "2")
    assert out["ranks"][0]["unknown_kernels"] == {tf.GEMM: 2 * 2 * 2, "my_fused_moe_kernel": 3}
    console = cpbench("profile", "--from", tmp_path / "r0.json.gz", "--layers", "2")
    assert "my_fused_moe_kernel x3" in console.stdout


def test_a_forward_range_of_the_users_choice(tmp_path):
    tf.write(tmp_path / "r0.json.gz", layers=2, per_layer=1, forwards=2)
    t = read_torch_trace(tmp_path / "r0.json.gz")
    assert [r.name for r in matching_ranges(t, r"ProfilerStep#2")] == ["ProfilerStep#2"]
    rf = find_forwards(t, FMHA, 2, r"ProfilerStep#2")
    assert [f.name for f in rf.forwards] == ["ProfilerStep#2"] and rf.per_forward() == [2]
    assert rf.forwards[0].kernels == 2 * 4  # GEMM, attention, memset, GEMM per layer
    assert verdict(rf.per_forward(), 2, CpEvidence(True, "--cp 2")) == ("fused path taken: 2 attention kernels per "
                                                                     "forward (1 per layer; CP: --cp 2)")
    assert verdict([2, 4], 2).startswith("forwards differ: 2, 4")
    assert "neither path's count" in verdict([3], 2)
    assert [t.kind for t in layer_times(rf.forwards, [1, 1, -1])] == ["all"]  # 3 kinds for 2 layers: not known


def test_kernels_without_launch_calls_fall_back_to_the_gpu_side_range(tmp_path):
    evs = [e for e in tf.events(layers=2, forwards=2) if e["cat"] != "cuda_runtime"]
    steps = [e for e in evs if e["cat"] == "user_annotation"]
    evs += [{**e, "cat": "gpu_user_annotation", "ts": e["ts"] + 5} for e in steps]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    rf = find_forwards(read_torch_trace(path), FMHA, 2)
    assert rf.per_forward() == [2, 2] and {f.bound for f in rf.forwards} == {"annotation"}


@pytest.mark.parametrize("content,message", [
    (b"hello, not a trace", "is not a torch.profiler trace"),
    (b"{}", "has no traceEvents"),
    (gzip.compress(json.dumps({"traceEvents": tf.events()}).encode())[:-40], "is cut short"),
    (b"\x00\x01binary", "neither a torch.profiler trace"),
], ids=["text", "empty-object", "truncated-gz", "binary"])
def test_bad_files_get_one_line_and_exit_2(tmp_path, content, message):
    path = tmp_path / ("t.json.gz" if content[:2] == b"\x1f\x8b" else "t.json" if content[:1] in b"h{" else "t.bin")
    path.write_bytes(content)
    r = cpbench("profile", "--from", path)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr


def test_a_cpu_only_program_is_refused(tmp_path):
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.randn(64, 64) @ torch.randn(64, 64)
    prof.export_chrome_trace(str(tmp_path / "cpu.json"))
    for path in (tmp_path / "cpu.json", HTA / "rank_non_gpu.json.gz"):
        r = cpbench("profile", "--from", path)
        assert r.returncode == 2 and "CPU-only program" in r.stderr, r.stderr


@pytest.mark.parametrize("second,message", [
    (dict(rank=0), "are both rank 0"),
    (dict(rank=1, world_size=4), "different process groups"),
    (dict(rank=1, base_ns=1_790_000_000_000_000_000 + 3600 * 10**9), "start 3600 s apart"),
])
def test_traces_of_different_runs_are_refused_naming_the_files(tmp_path, second, message):
    a = tf.write(tmp_path / "a.json.gz", rank=0, world_size=2)
    b = tf.write(tmp_path / "b.json.gz", **{"world_size": 2, **second})
    r = cpbench("profile", "--from", a, b)
    assert r.returncode == 2 and message in r.stderr and "a.json.gz" in r.stderr and "b.json.gz" in r.stderr


@pytest.mark.slow
def test_a_huge_trace_is_streamed(tmp_path):
    import tracemalloc

    # ~9 MB of host events with their Python stacks (as with_stack=True writes them): fewer, longer events parse
    # in a tenth of the time under tracemalloc, which is what this test measures
    evs = tf.events(layers=2) + [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "ts": 1000.0 + i, "dur": 1,
                                  "args": {"Input Dims": [[4096, 2880]] * 4, "Call stack": f"frame{i};" * 100}}
                                 for i in range(8_000)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    tracemalloc.start()
    t = read_torch_trace(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert path.stat().st_size > 8e6 and t.host_events > 8_000 and len(t.kernels) == 2 * 2 * 4
    assert peak < path.stat().st_size / 4, (peak, path.stat().st_size)  # json.load would hold it several times over


def test_traces_from_another_project(tmp_path):
    files = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]
    r = cpbench("profile", "--from", *files, "--json")
    assert r.returncode == 1 and "no attention kernel cpbench recognises was found in 2 trace(s)" in r.stderr
    ranks = json.loads(r.stdout)["ranks"]
    assert [x["rank"] for x in ranks] == [0, 1]
    assert sum(ranks[0]["unknown_kernels"].values()) == ranks[0]["kernel_kinds"]["other"] > 500
    assert any(n.startswith("ncclKernel_") for n in ranks[0]["unknown_kernels"]) is False  # NCCL is "comm"
    assert ranks[0]["kernel_kinds"]["comm"] > 0


def _kernels_per_step_ours_and_hta(files, tmp_path):
    """Per rank of the traces ``files`` (copied into ``tmp_path``): kernels per ``ProfilerStep#N`` as cpbench
    counts them (a dict by step name) and as HolisticTraceAnalysis does (a Series by iteration)."""
    hta = pytest.importorskip("hta.trace_analysis")
    for f in files:
        (tmp_path / f.name).write_bytes(f.read_bytes())
    analysis = hta.TraceAnalysis(trace_dir=str(tmp_path))
    sym = analysis.t.symbol_table.get_sym_table()
    out = []
    for t in read_traces([tmp_path]):
        df = analysis.t.get_trace(t.rank)
        steps = matching_ranges(t)
        ours = dict(zip([s.name for s in steps], map(len, range_members(t, steps))))
        out.append((ours, df[[sym[c] == "kernel" for c in df["cat"]]].groupby("iteration").size()))
    return out


def test_per_step_kernels_agree_with_holistic_trace_analysis(tmp_path):
    files = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]
    per_rank = _kernels_per_step_ours_and_hta(files, tmp_path)
    assert len(per_rank) == 2
    for ours, theirs in per_rank:
        for it, n in theirs.items():
            assert ours[f"ProfilerStep#{it}"] == n


def test_the_engine_beside_cpbenchs_cell(tmp_path):
    def layer_us(model, backend, timing, cp, bs, seq, rank, mode):
        return 1000.0

    rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(8192,), timings=("eager",), backends=("trtllm-fmha-v2",),
                     latency=layer_us)
    for row in rows:  # cpbench: 9.0 µs per window layer, 20.0 µs per full layer on rank 0; rank 1 twice that
        row.update(window_layers_us=18 * 9.0 * (1 + row["rank"]), full_layers_us=18 * 20.0 * (1 + row["rank"]))
    run = write_run(tmp_path / "run", rows)
    tf.write_run(tmp_path / "traces", world_size=2, layers=36, per_layer=1, forwards=2, window_us=12.0, full_us=40.0)
    out = from_json(tmp_path / "traces", "--model", "gpt-oss-120b", "--cell", "cp2 bs1 ext8192", "--run", run)
    cell = out["cell"]
    assert cell["status"] == "ok" and cell["mode"] == "fused" and cell["backend"] == "trtllm-fmha-v2"
    got = {(x["rank"], x["kind"]): (x["engine_median_us"], x["cpbench_us"], x["ratio"]) for x in cell["layers"]}
    assert got[(0, "window")] == pytest.approx((12.0, 9.0, 12.0 / 9.0))
    assert got[(1, "full")] == pytest.approx((40.0, 40.0, 1.0))
    r = cpbench("profile", "--from", tmp_path / "traces", "--cell", "cp2 bs4 ext8192", "--run", run)
    assert r.returncode == 2 and "has no ok eager row of cp2 bs4 extend8192 on trtllm-fmha-v2 fused" in r.stderr


def test_json_holds_null_where_a_number_is_missing(tmp_path):
    """#49: --json printed bare NaN (not JSON) where cpbench's row has no per-layer time (a CPU run's rows)."""
    rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(8192,), timings=("eager",), backends=("trtllm-fmha-v2",))
    run = write_run(tmp_path / "run", rows)  # no window_layers_us / full_layers_us
    tf.write_run(tmp_path / "traces", world_size=2, layers=36, per_layer=1, forwards=2, window_us=12.0, full_us=40.0)
    r = cpbench("profile", "--from", tmp_path / "traces", "--model", "gpt-oss-120b", "--cell", "cp2 bs1 ext8192",
                "--run", run, "--json")
    assert r.returncode == 0, r.stderr

    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    out = json.loads(r.stdout, parse_constant=refuse)  # NaN, Infinity: not JSON
    layer = out["cell"]["layers"][0]
    assert (layer["engine_median_us"], layer["cpbench_us"], layer["ratio"]) == (12.0, None, None)


def test_dumps_writes_null_for_every_number_not_measured():
    """The one writer of --json output and profile.json/explain.json (domain/jsonfile.dumps)."""
    from cpbench.domain.jsonfile import dumps

    obj = {"a": float("nan"), "b": [1.5, float("inf"), (float("-inf"), 2)], "c": {"d": float("nan")}, "e": "NaN"}
    assert dumps(obj) == '{"a": null, "b": [1.5, null, [null, 2]], "c": {"d": null}, "e": "NaN"}'


def test_a_cell_that_cannot_run_here_keeps_the_ranks_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tf.write_run(tmp_path / "traces", world_size=2, layers=36, per_layer=2)
    r = cpbench("profile", "--from", tmp_path / "traces", "--cell", "cp2 bs1 ext256", "--device", "cpu")
    assert r.returncode == 2 and "cannot measure cp2 bs1 extend256 on trtllm-fmha-v2 here" in r.stderr
    assert "pass --run with a run of that cell" in r.stderr and r.stdout.count("two-call: 72") == 2
    # the reason is whole (#49: it was cut at 160 characters, mid-word)
    assert ("(`cpbench doctor` lists the backends this machine can run)): pass --run with a run of that cell made "
            "where it runs") in r.stderr, r.stderr


@pytest.mark.parametrize("args,message", [
    (["--cell", "cp4 bs1 ext8192"], "--cell, --run and --forward-range go with --from"),
    (["--forward-range", "prefill"], "--cell, --run and --forward-range go with --from"),
    (["--from", "x.json", "--bs", "8"], "--bs measures cpbench's own cells; --from only reads traces"),
    (["--from", "x.json", "--cp", "0"], "give the CP size the engine ran, one integer >= 1"),
    (["--from", "x.json", "--cp", "2,4"], "give the CP size the engine ran, one integer >= 1"),
    (["--from", "x.json", "--cp", "2", "--cell", "cp4 bs1 ext8192"], "--cp 2 and --cell cp4 disagree"),
    (["--from", "x.json", "--nsys"], "--nsys measures cpbench's own cells"),
    (["--from", "x.json", "--launch", "torchrun"], "--launch measures cpbench's own cells"),
    (["--from", "x.json", "--cell", "cp4 bs1"], "give it as 'cp4 bs1 ext8192'"),
    (["--from", "missing.json"], "no such file or directory"),
    (["extra.json"], "trace files follow --from"),
])
def test_options_of_from(tmp_path, args, message):
    r = cpbench("profile", *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_the_forward_range_is_a_glob_that_cannot_stall(tmp_path):
    evs = tf.events(layers=2) + [{"ph": "X", "cat": "user_annotation", "name": "a" * 40, "ts": 0, "dur": 1}]
    (tmp_path / "r.json").write_text(json.dumps({"traceEvents": evs}))
    r = cpbench("profile", "--from", tmp_path / "r.json", "--layers", "2", "--forward-range", "(a+)+b")
    assert r.returncode == 2 and "--forward-range '(a+)+b' matched no range in 1 trace(s)" in r.stderr
    r = cpbench("profile", "--from", tmp_path / "r.json", "--layers", "2", "--forward-range", "ProfilerStep#[12]",
                "--json")
    assert json.loads(r.stdout)["ranks"][0]["forwards"] == 2
    r = cpbench("profile", "--from", tmp_path / "r.json", "--forward-range", "")
    assert r.returncode == 2 and "the forward range is empty" in r.stderr


@pytest.mark.parametrize("mode,count", [("fused", 36), ("two-call", 72)])
def test_cpbench_own_h200_traces(mode, count):
    """cpbench's own H200 traces (one forward per file, one file per rank, no distributedInfo): attention only, so
    the layers are cut from the count; the window layers' FMHAv2 kernels are its sliding-window variant."""
    files = sorted((Path(__file__).parent.parent / "docs" / "runs" / "h200-fmha-v2-profile" / "profiles").glob(
        f"*_{mode}.json.gz"))
    traces = read_traces(files)
    assert [t.rank for t in traces] == [0, 1, 2, 3]
    for t in traces:
        rf = find_forwards(t, FMHA, 36)
        assert rf.per_forward() == [count] and rf.forwards[0].bound == "annotation"
        for i, layer in enumerate(rf.forwards[0].layers):
            assert all(("sliding" in k.name) == (i % 2 == 0) for k in layer), (i, [k.name for k in layer])
        window, full = layer_times(rf.forwards, [127, -1] * 18)
        assert window.kind == "window" and full.kind == "full" and full.median > 3 * window.median


def test_an_nsys_export_one_rank_per_process(tmp_path):
    db = tf.write_nsys_sqlite(tmp_path / "server.sqlite", layers=4, per_layer=2, forwards=3)
    out = from_json(db, "--layers", "4", "--forward-range", "prefill_forward", "--cp", "2")
    assert [(r["rank"], r["source"]) for r in out["ranks"]] == [(0, "nsys"), (1, "nsys")]
    for r in out["ranks"]:
        assert r["bound"] == "annotation" and r["attention_kernels_per_forward"] == [8, 8, 8]
        assert "two-call: 8" in r["verdict"] and r["file"] == str(db)
    unbounded = from_json(db, "--layers", "4")  # the default range is not in an nsys report: the layer count
    assert unbounded["ranks"][0]["bound"] == "layer count" and unbounded["ranks"][0]["forwards"] == 3


def test_nsys_inputs_that_are_not_reports(tmp_path):
    import sqlite3

    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x INT)").connection.commit()
    r = cpbench("profile", "--from", other)
    assert r.returncode == 2 and "not an nsys export" in r.stderr
    (tmp_path / "x.nsys-rep").write_bytes(b"not a report")
    r = cpbench("profile", "--from", tmp_path / "x.nsys-rep", env={"PATH": str(tmp_path)})
    assert r.returncode == 2 and ("nsys is not installed" in r.stderr or "could not export" in r.stderr), r.stderr


def test_a_report_and_its_export_in_one_directory_count_once(tmp_path):
    import os

    (tmp_path / "server.nsys-rep").write_bytes(b"the report the export came from")
    tf.write_nsys_sqlite(tmp_path / "server.sqlite", layers=2)
    os.utime(tmp_path / "server.nsys-rep", (1_700_000_000, 1_700_000_000))  # exported after it was recorded
    assert [t.path for t in read_traces([tmp_path])] == [str(tmp_path / "server.sqlite")] * 2


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_the_stand_in_engine_on_a_cpu_writes_a_trace_that_is_refused(tmp_path):
    """tests/engine_like_prefill.py (no cpbench import) profiles its CPU forward as an engine would: a real
    torch.profiler trace with ProfilerStep ranges and distributedInfo, but no kernel: refused in one line."""
    import subprocess
    import sys

    script = Path(__file__).with_name("engine_like_prefill.py")
    subprocess.run([sys.executable, str(script), "--cpu", "--cp", "1", "--layers", "2", "--forwards", "2",
                    "--extend-len", "64", "--port", "29751", "--out", str(tmp_path)], check=True, timeout=150,
                   capture_output=True)
    (trace,) = tmp_path.glob("*-TP-0.trace.json.gz")
    r = cpbench("profile", "--from", tmp_path)
    assert r.returncode == 2 and "CPU-only program" in r.stderr and trace.name in r.stderr


def test_cpbench_own_traces_beside_its_own_run_agree():
    """Read back as an engine's, cpbench's H200 profile of cp4 bs1 ext8192 (FMHAv2, fused) gives each rank's
    per-layer attention time within 3 % of the committed run's (whose layer time also holds FMHAv2's memset)."""
    root = Path(__file__).parent.parent / "docs" / "runs"
    files = sorted((root / "h200-fmha-v2-profile" / "profiles").glob("*_fused.json.gz"))
    out = from_json(*files, "--cell", "cp4 bs1 ext8192", "--run", root / "h200-passes-a")
    layers = out["cell"]["layers"]
    assert out["cell"]["mode"] == "fused" and len(layers) == 8  # 4 ranks x 2 layer kinds
    assert all(0.97 <= x["ratio"] <= 1.01 for x in layers), [round(x["ratio"], 3) for x in layers]


def test_a_run_of_another_layer_count_is_refused(tmp_path):
    rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(64,), timings=("eager",), backends=("trtllm-fmha-v2",))
    for row in rows:
        row.update(num_layers=2, window_layers_us=100.0, full_layers_us=300.0)
    run = write_run(tmp_path / "run", rows)
    tf.write_run(tmp_path / "t", world_size=2, layers=36)
    r = cpbench("profile", "--from", tmp_path / "t", "--cell", "cp2 bs1 seq64", "--run", run)
    assert r.returncode == 2 and "with 2 layers, and the traces were read as gpt-oss-120b with 36" in r.stderr


def test_inputs_that_cannot_be_one_run(tmp_path):
    import os

    a = tf.write(tmp_path / "a.json.gz", rank=0)
    db = tf.write_nsys_sqlite(tmp_path / "n.sqlite")
    for args, message in (([a, a], "is given twice"), ([a, db], "torch.profiler traces and nsys reports given together"),
                          ([db, tf.write_nsys_sqlite(tmp_path / "m.sqlite")], "2 nsys reports given")):
        r = cpbench("profile", "--from", *args)
        assert r.returncode == 2 and message in r.stderr, r.stderr
    os.mkfifo(tmp_path / "fifo.json")
    r = cpbench("profile", "--from", tmp_path / "fifo.json")
    assert r.returncode == 2 and "is not a regular file" in r.stderr


def test_traces_without_ranks_say_how_they_are_numbered(tmp_path):
    for i in range(2):
        path = tmp_path / f"r{i}.json"
        path.write_text(json.dumps({"traceEvents": tf.events(layers=2)}))
    r = cpbench("profile", "--from", tmp_path, "--layers", "2")
    assert r.returncode == 0 and "ranks are inferred from the number in each file name (the traces name none" in r.stdout
    tf.write(tmp_path / "r2.json.gz", rank=1, world_size=3)
    r = cpbench("profile", "--from", tmp_path, "--layers", "2")
    assert r.returncode == 2 and "names no rank (no distributedInfo) while others do" in r.stderr


def test_two_backends_and_malformed_events_are_said(tmp_path):
    evs = tf.events(layers=2, per_layer=1, forwards=1)
    flashinfer_fa3 = "flashinfer::PrefillWithKVCacheKernel<CollectiveMainloop>"
    first = next(e for e in evs if e["cat"] == "kernel" and "fmha" in e["name"])
    evs.append({**first, "name": flashinfer_fa3, "ts": first["ts"] + 1})  # a second backend's kernel in layer 0
    bad = [{"ph": "X", "cat": "kernel", "name": tf.ATTN.format(""), "ts": 5.0, "dur": -3},
           {"ph": "X", "cat": "kernel", "name": None, "ts": 5.0, "dur": 3},
           {"ph": "X", "cat": "kernel", "name": tf.ATTN.format(""), "ts": "5", "dur": 3}]
    (tmp_path / "r.json").write_text(json.dumps({"traceEvents": evs + bad}))
    out = from_json(tmp_path / "r.json", "--layers", "2")
    (r,) = out["ranks"]
    assert r["backends"] == {"trtllm-fmha-v2": 2, "flashinfer-fa3": 1} and r["malformed_kernel_events"] == 3
    assert all(t["median"] >= 0 for t in r["layer_times_us"])
    console = cpbench("profile", "--from", tmp_path / "r.json", "--layers", "2").stdout
    assert "attention kernels of 2 backends: trtllm-fmha-v2 x2, flashinfer-fa3 x1" in console
    assert "3 kernel events without a name, start or duration (or a negative one) were left out" in console


def test_float_correlation_ids_and_unknown_layer_kinds(tmp_path):
    evs = tf.events(layers=4, per_layer=1, forwards=2)
    for e in evs:
        if "args" in e:
            e["args"]["correlation"] = float(e["args"]["correlation"])
    (tmp_path / "r.json").write_text(json.dumps({"traceEvents": evs}))
    (r,) = from_json(tmp_path / "r.json", "--layers", "4")["ranks"]
    assert r["bound"] == "annotation" and r["attention_kernels_per_forward"] == [4, 4]
    model = ("--model", "gpt-oss-120b", "--layers", "8")  # a model with sliding windows: layers split by kind
    (r,) = from_json(tmp_path / "r.json", *model)["ranks"]  # 4 layers found, 8 asked: kinds unknown
    assert [t["kind"] for t in r["layer_times_us"]] == ["all"]
    assert "all layers: " in cpbench("profile", "--from", tmp_path / "r.json", *model).stdout


def test_an_nsys_export_with_null_rows(tmp_path):
    import sqlite3

    db = tf.write_nsys_sqlite(tmp_path / "n.sqlite", pids=(7,), layers=2)
    con = sqlite3.connect(db)
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (NULL, NULL, 0, 7, 1, ?, 1, 1)", ((7 << 24),))
    con.commit()
    con.close()
    (r,) = from_json(db, "--layers", "2", "--forward-range", "prefill_forward")["ranks"]
    assert r["malformed_kernel_events"] == 1 and r["attention_kernels_per_forward"] == [2, 2]


ENGINE = Path(__file__).parent.parent / "docs" / "evidence" / "h200-engine-traces"  # tests/engine_like_prefill.py, H200


@pytest.mark.parametrize("name,bound,per_forward", [
    ("cp4-bs1-ext8192-fused", "annotation", 36), ("cp4-bs1-ext8192-two-call", "annotation", 72),
    ("cp4-bs1-ext8192-fused-unannotated", "layer count", 36)])
def test_the_stand_in_engines_h200_traces(name, bound, per_forward):
    """Traces of a program that does not import cpbench (FlashInfer fa3 between GEMMs, one process per rank)."""
    out = from_json(ENGINE / name)
    assert [(r["rank"], r["rank_source"]) for r in out["ranks"]] == [(i, "distributedInfo") for i in range(4)]
    for r in out["ranks"]:
        assert r["backend"] == "flashinfer-fa3" and r["bound"] == bound and r["attention_kernels_per_forward"] == [per_forward] * 3
        assert r["kernel_kinds"]["other"] >= 3 * 36 * 2  # the two projection GEMMs of every layer, listed by name
        assert r["verdict"].endswith("no evidence of CP in this trace, pass --cp to judge fusion")  # gloo: no kernel
    path = "fused path taken" if per_forward == 36 else "two-call"
    assert {r["verdict"] for r in from_json(ENGINE / name, "--cp", "4")["ranks"]} == {
        f"{path}: {per_forward} attention kernels per forward ({per_forward // 36} per layer; CP: --cp 4)"}


def test_the_stand_in_engine_under_nsys():
    out = from_json(ENGINE / "nsys" / "engine-fused.sqlite", "--forward-range", "prefill_forward")
    assert [(r["rank"], r["rank_source"], r["source"]) for r in out["ranks"]] == [(0, "process order", "nsys"),
                                                                                  (1, "process order", "nsys")]
    for r in out["ranks"]:
        assert r["bound"] == "annotation" and r["attention_kernels_per_forward"] == [36, 36] and r["backend"] == "flashinfer-fa3"


@pytest.mark.parametrize("mode", ["fused", "two-call"])
def test_the_stand_in_engine_beside_cpbenchs_cell(mode):
    """The engine's per-layer FlashInfer fa3 time is cpbench's (the committed schema 2 run's fa3 rows, read as
    flashinfer-fa3), per rank and layer kind, within 5 %."""
    run = Path(__file__).parent.parent / "docs" / "runs" / "h200-engine-cell-fa3"
    cell = from_json(ENGINE / f"cp4-bs1-ext8192-{mode}", "--cell", "cp4 bs1 ext8192", "--run", run)["cell"]
    assert cell["mode"] == mode and cell["backend"] == "flashinfer-fa3" and len(cell["layers"]) == 8
    assert all(0.95 <= x["ratio"] <= 1.05 for x in cell["layers"]), [round(x["ratio"], 3) for x in cell["layers"]]


def test_the_stand_in_engines_steps_agree_with_holistic_trace_analysis(tmp_path):
    per_rank = _kernels_per_step_ours_and_hta(sorted((ENGINE / "cp4-bs1-ext8192-two-call").iterdir()), tmp_path)
    assert len(per_rank) == 4
    for ours, theirs in per_rank:
        last = max(int(name.split("#")[1]) for name in ours)  # HTA leaves the last step out by default
        whole = {it: n for it, n in theirs.items() if 0 <= it < last}
        assert len(whole) == 2 and all(ours[f"ProfilerStep#{it}"] == n for it, n in whole.items())
