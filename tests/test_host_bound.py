"""GPU busy time of a profiled forward, and host-bound cells named in the report."""

from pathlib import Path

import pandas as pd
import pytest

from cpbench.kernels.backends.registry import kernel_patterns
from cpbench.domain.models import get_preset
from cpbench.results.critical_path import critical_path
from cpbench.results.derived import derive
from cpbench.results.verdicts import effect_text
from cpbench.results.store import load_run
from cpbench.report.run_report import render_report
from cpbench.profiles.capture import load_trace
from cpbench.profiles.kernels import count_events, union_length
from runfactory import make_rows

FIX = Path(__file__).parent / "fixtures"
RUNS = Path(__file__).parent.parent / "docs" / "runs"


def test_union_length_counts_overlaps_once():
    assert union_length([(0, 10), (5, 15), (20, 25), (21, 22)]) == 20
    assert union_length([]) == 0


@pytest.mark.parametrize("mode", ["two-call", "fused"])
def test_gpu_busy_time_of_the_h200_traces_matches_the_graph_latency(mode):
    c = count_events(load_trace(FIX / f"h200_fa3_cp4_bs1_seq8192_r0_{mode}.json.gz"), kernel_patterns("flashinfer-fa3"))
    df, _ = load_run(RUNS / "h200-fa3-gpt-oss-120b")
    graph = df[(df.cp_size == 4) & (df.bs == 1) & (df.max_extend_len == 8192) & (df["rank"] == 0) & (df["mode"] == mode)
               & (df.timing == "graph")]["latency_us_median"].iloc[0]
    # one forward's kernels back to back: the GPU busy time is what a CUDA-graph replay takes
    assert c.gpu_busy_us == pytest.approx(graph, rel=0.02)


def test_layer_times_follow_the_launch_into_its_layer_range():
    """Each GPU activity is charged to the layer range that holds its launch call (by correlation id), its
    time counted once where kernels overlap; a kernel launched outside every layer counts in no layer;
    without GPU activity (CPU) a layer's time is its range's host duration."""
    def ev(cat, name, ts, dur, corr=None):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur,
                **({"args": {"correlation": corr}} if corr is not None else {})}
    events = [ev("user_annotation", "layer0", 0, 10), ev("user_annotation", "layer1", 10, 10),
              ev("cuda_runtime", "cudaLaunchKernel", 2, 1, 7), ev("cuda_runtime", "cudaLaunchKernel", 4, 1, 8),
              ev("cuda_runtime", "cudaLaunchKernel", 12, 1, 9), ev("cuda_runtime", "cudaLaunchKernel", 25, 1, 10),
              ev("kernel", "attn", 100, 30, 7), ev("kernel", "attn", 120, 30, 8),  # overlap: 50 µs busy
              ev("kernel", "attn", 200, 12, 9), ev("kernel", "tail", 300, 99, 10)]
    assert count_events(events, ("attn",)).layer_us == {0: 50.0, 1: 12.0}
    cpu = count_events(events[:2] + [ev("user_annotation", "layer10", 20, 4), ev("user_annotation", "prev", 1, 2)])
    assert cpu.layer_us == {0: 10.0, 1: 10.0, 10: 4.0} and cpu.attention_calls == 1


@pytest.mark.parametrize("mode", ["two-call", "fused"])
def test_layer_times_of_the_h200_traces_add_up_to_the_gpu_busy_time(mode):
    """On a real flashinfer-fa3 forward (36 layers, GPT-OSS alternates window and full layers) every kernel runs in
    a layer: the per-layer GPU times add up to the forward's GPU busy time, and a full layer at 8K tokens takes
    longer than a 128-token window layer."""
    c = count_events(load_trace(FIX / f"h200_fa3_cp4_bs1_seq8192_r0_{mode}.json.gz"), kernel_patterns("flashinfer-fa3"))
    assert sorted(c.layer_us) == list(range(36))
    assert sum(c.layer_us.values()) == pytest.approx(c.gpu_busy_us, rel=1e-6)
    window = [w >= 0 for w in get_preset("gpt-oss-120b").window_left_per_layer]
    assert min(us for i, us in c.layer_us.items() if not window[i]) > max(
        us for i, us in c.layer_us.items() if window[i])


def test_host_bound_cells_are_named_with_their_gpu_time_speedup():
    rows = make_rows(cp_sizes=(4,), bss=(1,), seqs=(1024, 8192), timings=("eager",))
    for r in rows:
        small = r["max_extend_len"] == 1024
        # small cells: the GPU is busy for a third of the eager forward (launch-bound)
        r["gpu_busy_us"] = r["latency_us_median"] / (3.0 if small else 1.05) * (1.1 if r["mode"] == "fused" else 1)
    df = derive(pd.DataFrame(rows))  # host_bound: eager latency > 1.2 x GPU busy time
    cp = critical_path(df)
    assert list(cp.sort_values("max_extend_len")["host_bound"]) == [True, False]
    small = cp[cp.max_extend_len == 1024].iloc[0]
    assert small["gpu_speedup"] == pytest.approx(small["gpu_busy_two_call_us"] / small["gpu_busy_fused_us"])
    text = render_report(df, {}, "hb")
    bullet = next(ln for ln in text.splitlines() if "Host-bound" in ln)
    assert "1 cell(s)" in bullet and "cp 4, bs 1, 1K tokens" in bullet and f"{effect_text(small['gpu_speedup'])} GPU time" in bullet


def test_layer_times_ignore_correlation_ids_that_are_not_ints():
    """A hand-made trace whose correlation ids are lists or strings charges nothing to a layer, never raises."""
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2, "dur": 1}
    events = [{"ph": "X", "cat": "user_annotation", "name": "layer0", "ts": 0, "dur": 10},
              {**launch, "args": {"correlation": [1]}},
              {"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": 3, "args": {"correlation": [1]}},
              {"ph": "X", "cat": "kernel", "name": "k", "ts": 9, "dur": 3, "args": {"correlation": "1"}}]
    c = count_events(events)
    assert c.layer_us == {} and c.gpu_busy_us == 6.0  # no kernel tied to a layer: unknown, not 0
    ranges = [{"ph": "X", "cat": "user_annotation", "name": n, "ts": 0, "dur": 1}
              for n in ("layer" + "9" * 5000, "layerX")]
    assert count_events(ranges).layer_us == {}  # not layer ranges of a forward: ignored, no error
