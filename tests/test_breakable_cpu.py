"""--timing breakable on a CPU: the whole forward (the rest of every layer around attention) runs with its
segments eager, labelled so, on every rank and mode; the attention outputs equal the eager forward's; the
report says it is a functional check. --layer-rest-us replaces the model's work."""

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
                "--timing", "eager,breakable", "--no-profile", "--out", out, *extra)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines()]
    return out, [x for x in rows if x["timing"] == "breakable"], [x for x in rows if x["timing"] == "eager"]


def test_breakable_forward_on_cpu(tmp_path):
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


def test_layer_rest_us_replaces_the_model(tmp_path):
    _, br, _ = _sweep(tmp_path, "--layer-rest-us", "50")
    assert {x["layer_rest"] for x in br} == {"50 us"} and {x["rest_flops"] for x in br} == {0.0}
    assert {x["status"] for x in br} == {"ok"}
