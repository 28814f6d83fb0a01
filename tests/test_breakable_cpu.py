"""--timing breakable on a CPU: the whole forward (the rest of every layer around attention) runs with its
segments eager, labelled so, on every rank and mode; the attention outputs equal the eager forward's; the
report says it is a functional check. --layer-rest-us replaces the model's work. A few samples per variant
(--budget-ms 5): no test here reads the timing beyond its being measured."""

import json

import pytest

from clirun import cpbench

TINY = {"model_type": "gpt_oss", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "sliding_window": 8, "hidden_size": 64, "intermediate_size": 32, "num_local_experts": 8,
        "num_experts_per_tok": 2, "attention_bias": True}


def _sweep(tmp_path, *extra):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    out = tmp_path / "run"
    r = cpbench("sweep", "--model-config", cfg, "--cp", "2", "--bs", "1", "--extend-len", "32", "--device", "cpu",
                "--timing", "eager,breakable", "--budget-ms", "5", "--no-profile", "--out", out, *extra)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines()]
    return out, [x for x in rows if x["timing"] == "breakable"], [x for x in rows if x["timing"] == "eager"]


@pytest.mark.slow
def test_breakable_forward_on_cpu(tmp_path, rough_charts):
    out, br, eager = _sweep(tmp_path)
    assert len(br) == 4 and {x["status"] for x in br} == {"ok"}  # 2 ranks x 2 modes
    assert {x["segments"] for x in br} == {"eager: CPU (no CUDA graphs)"}
    assert {x["ep_size"] for x in br} == {2} and {x["layer_rest"] for x in br} == {"model"}
    assert all(x["diff_vs_eager"] == 0.0 for x in br)
    flops = {(x["rank"], x["mode"]): x["flops"] for x in eager}
    for x in br:  # the forward's FLOPs: attention's plus the rest's (2 layers of 16 padded rows here)
        assert x["rest_flops"] > 0 and x["flops"] == pytest.approx(flops[(x["rank"], x["mode"])] + x["rest_flops"])
        assert x["window_layers_us"] > 0 and x["full_layers_us"] > 0 and x["graph_bucket"] == x["tokens_padded"]
    assert "Breakable forward: 4 of 4 rows ran the whole forward" in (out / "report.md").read_text()


@pytest.mark.slow
def test_layer_rest_us_replaces_the_model(tmp_path, rough_charts):
    _, br, _ = _sweep(tmp_path, "--layer-rest-us", "50")
    assert {x["layer_rest"] for x in br} == {"50 us"} and {x["rest_flops"] for x in br} == {0.0}
    assert {x["status"] for x in br} == {"ok"}


class _CountingA2A:
    """An all-to-all of a 2-rank group whose peer sends back what it got (out = inp), counting calls."""

    ranks = 2

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, out, inp, what) -> None:
        out.copy_(inp)
        self.calls.append(what)


def test_real_ranks_split_the_moe_at_its_dispatch_and_combine():
    import torch

    from cpbench.studies.breakable.layer_rest import LayerRest
    from cpbench.domain.hf_config import mlp_fields
    from cpbench.domain.layer_rest import rest_shape
    from cpbench.domain.models import ModelSpec

    spec = ModelSpec("tiny", 2, 4, 2, 16, (7, -1), True, **mlp_fields(TINY, "tiny"))
    a2a = _CountingA2A()
    rest = LayerRest(rest_shape(spec, 12, cp_size=2), 2, torch.device("cpu"), torch.float32, a2a=a2a)
    steps = rest.after_steps(1)
    assert [(n, k) for n, _, k in steps] == [("after_attention", "layer"), ("moe_dispatch", "comm"),
                                             ("experts", "layer"), ("moe_combine", "comm"), ("moe_reduce", "layer")]
    x0 = rest.x.clone()
    for _, fn, _ in steps:
        fn()
    assert a2a.calls == ["the MoE dispatch of layer 1", "the MoE combine of layer 1"]
    assert rest.a2a_rows == 12 * 2 and rest.a2a_bytes == 2 * 24 * 64 * 4  # T x top_k rows of H fp32, both ways
    assert not torch.equal(rest.x, x0) and torch.isfinite(rest.x).all()


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_torchrun_breakable_forward_runs_the_moe_all_to_all(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    env.pop("CPBENCH_INJECT_FAULT", None)
    p = subprocess.run([sys.executable, "-m", "cpbench", "sweep", "--launch", "torchrun", "--nproc-per-node", "2",
                        "--cp", "2", "--bs", "1", "--extend-len", "32", "--model-config", str(cfg), "--timing",
                        "breakable", "--budget-ms", "5", "--no-profile", "--no-report", "--dist-timeout", "30",
                        "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=140)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"} and {r["launch"] for r in rows} == {"torchrun"}
    # 16 padded tokens x top-2 routed rows of 64 bf16 values, dispatched and combined every layer
    assert {r["moe_a2a_bytes"] for r in rows} == {2 * 32 * 64 * 2} and {r["diff_vs_eager"] for r in rows} == {0.0}


def test_a_cells_segments_are_captured_once_for_all_its_ranks_and_modes(monkeypatch):
    """The rest's segments read only the rest's buffers, so one capture per (layer, segment) serves every rank,
    mode and backend of the cell; two-call (two attention steps) and fused (one) find the same segments; layers
    outside ``capture`` run eagerly; release() forgets them."""
    import torch

    from cpbench.domain.hf_config import mlp_fields
    from cpbench.domain.layer_rest import rest_shape
    from cpbench.domain.models import ModelSpec
    from cpbench.kernels.backends.base import Prepared, Step
    from cpbench.studies.breakable.layer_rest import LayerRest
    from cpbench.studies.breakable import layers as breakable
    from cpbench.studies.breakable.rest import CellRest

    captured: list = []

    def fake_capture(fns, owner=None):  # a "replay" that says it is one, and runs the segment
        captured.extend(fns)
        return [lambda f=f: ("replay", f()) for f in fns]

    monkeypatch.setattr(breakable, "capture_segments", fake_capture)
    spec = ModelSpec("tiny", 3, 4, 2, 16, (7, -1, 7), True, **mlp_fields(TINY, "tiny"))
    rest = CellRest(LayerRest(rest_shape(spec, 12, cp_size=2), 3, torch.device("cpu"), torch.float32),
                    graphs=True, columns={})
    attn = lambda: None  # noqa: E731

    def prep(names):  # a forward of 3 layers whose attention steps are ``names``
        return Prepared(layers=[[Step(n, attn) for n in names] for _ in range(3)], outputs={}, setup_us={},
                        setup_mem={}, kernel_patterns=())

    two_call = breakable.breakable_layers(prep(["prev", "next"]), rest, capture=[1, 2])
    assert len(captured) == 4 and len(rest.segments) == 4  # layers 1 and 2: before and after attention
    fused = breakable.breakable_layers(prep(["combined"]), rest, capture=[1, 2])
    again = breakable.breakable_layers(prep(["prev", "next"]), rest, capture=[1, 2])
    assert len(captured) == 4, "a segment was captured twice"
    assert [len(x) for x in two_call] == [4, 4, 4] and [len(x) for x in fused] == [3, 3, 3]
    assert fused[1][0] is two_call[1][0] is again[1][0] and fused[2][-1] is two_call[2][-1]
    assert two_call[1][0]()[0] == "replay" and two_call[0][0]() is None  # layer 0: eager, not captured
    rest.release()
    assert rest.segments == {}
