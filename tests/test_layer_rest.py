"""The rest of a layer (domain/layer_rest.py) against hand-computed shapes and FLOPs, the token bucket rule, the
--ep / --layer-rest-us errors, the config fields it reads, and the layer-synchronised critical path on
synthetic per-layer-kind times (a case where the sum over kinds of the slowest rank differs from the slowest
rank's sum)."""

import json
import math

import pandas as pd
import pytest

from cpbench.errors import CpbenchInputError
from cpbench.results.critical_path import critical_path
from cpbench.results.uncertainty import layer_synced
from cpbench.domain.hf_config import from_hf_config
from cpbench.domain.layer_rest import check_ep, graph_bucket, rest_shape
from cpbench.domain.models import get_preset
from cpbench.domain.tp import split_heads
from clirun import cpbench


def test_gpt_oss_120b_rank_at_cp4_the_prs_launch():
    # --tp 4 --ep 4 --attn-cp-size 4: attention TP 1, 32 of 128 experts per rank, 512 padded tokens (bs 1 x 2K)
    s = rest_shape(get_preset("gpt-oss-120b"), 512, cp_size=4)
    assert (s.qkv_out, s.o_in, s.local_experts, s.expert_intermediate, s.routed_tokens) == (
        (64 + 2 * 8) * 64, 64 * 64, 32, 2880, 512 * 4)
    assert s.rows_per_expert == 2048 // 32
    by_name = {g.name: g.flops for g in s.gemms()}
    assert by_name == {"qkv_proj": 2 * 512 * 2880 * 5120, "o_proj": 2 * 512 * 4096 * 2880,
                       "router": 2 * 512 * 2880 * 128, "experts_gate_up": 2 * 64 * 2880 * 5760 * 32,
                       "experts_down": 2 * 64 * 2880 * 2880 * 32}
    assert s.flops == 129_478_164_480
    # weights per layer: projections with bias, router with bias, 32 experts with biases, two norms (bf16)
    elems = (2880 * 5120 + 5120) + (4096 * 2880 + 2880) + (2880 * 128 + 128) + 32 * (2880 * 5760 + 5760) \
        + 32 * (2880 * 2880 + 2880) + 2 * 2880
    assert s.weight_bytes(2) == 2 * elems


def test_expert_parallelism_below_the_gpu_count_splits_each_experts_width():
    s = rest_shape(get_preset("gpt-oss-120b"), 512, cp_size=4, ep=2)
    assert (s.local_experts, s.expert_intermediate, s.routed_tokens) == (64, 1440, 4 * 512 * 4 // 2)
    # the experts' FLOPs over all 4 GPUs equal those of 4 x 512 tokens x top-4 at full width
    experts = sum(g.flops for g in s.gemms() if g.name.startswith("experts"))
    assert 4 * experts == 2 * (4 * 512 * 4) * 2880 * (5760 + 2880)


def test_dense_llama_rank():
    s = rest_shape(split_heads(get_preset("llama-3.1-8b"), 2), 1024, cp_size=2, tp_size=2)
    assert not s.is_moe and s.mlp_intermediate == 14336 // 2
    assert s.flops == 2 * 1024 * 4096 * ((16 + 2 * 4) * 128) + 2 * 1024 * (16 * 128) * 4096 \
        + 2 * 1024 * 4096 * 14336 + 2 * 1024 * 7168 * 4096  # qkv (16 q + 4 kv heads at tp 2), o, gate_up, down


@pytest.mark.parametrize("ep, words", [(3, "does not divide the 128 experts"), (0, "must be an integer >= 1"),
                                       (8, "does not divide the 4 GPUs")])
def test_bad_ep_is_one_line(ep, words):
    with pytest.raises(CpbenchInputError, match=words):
        check_ep(get_preset("gpt-oss-120b"), ep, (4,), 1)


def test_ep_on_a_dense_model_and_negative_rest_exit_2():
    r = cpbench("sweep", "--model", "llama-3.1-8b", "--timing", "breakable", "--ep", "2", "--device", "cpu")
    assert r.returncode == 2 and "has no MoE" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cpbench("sweep", "--timing", "breakable", "--layer-rest-us", "-5", "--device", "cpu")
    assert r.returncode == 2 and "--layer-rest-us must be" in r.stderr
    r = cpbench("sweep", "--ep", "4", "--timing", "eager", "--device", "cpu")
    assert r.returncode == 2 and "add --timing breakable" in r.stderr


def test_buckets_as_sglang_pads_them(tmp_path):
    assert graph_bucket(3000, (4096, 65536)) == (4096, "graph")
    assert graph_bucket(1000, (4096,))[1].startswith("eager: bucket 4096 > 2x 1000")
    assert graph_bucket(70000, (4096, 65536))[1].startswith("eager: 70000 tokens > the largest bucket")
    assert graph_bucket(777, ()) == (777, "graph")
    # --graph-buckets is read like every other list option (cli.options.int_list): sorted, unique
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 16, "hidden_size": 64,
                               "intermediate_size": 32}))
    out = tmp_path / "run"
    r = cpbench("sweep", "--model-config", cfg, "--cp", "2", "--bs", "1", "--extend-len", "32", "--device", "cpu",
                "--timing", "breakable", "--layer-rest-us", "5", "--no-profile", "--no-report",
                "--graph-buckets", "65536, 4096,139264,4096", "--out", out)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "manifest.json").read_text())["config"]["graph_buckets"] == [4096, 65536, 139264]
    r = cpbench("sweep", "--timing", "breakable", "--graph-buckets", "4096,-1", "--device", "cpu")
    assert r.returncode == 2 and "--graph-buckets values must be >= 1, got -1" in r.stderr


def test_config_fields(tmp_path):
    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
           "head_dim": 16, "sliding_window": 8, "hidden_size": 96, "intermediate_size": 48, "num_local_experts": 8,
           "num_experts_per_tok": 2, "attention_bias": True, "quantization_config": {"quant_method": "mxfp4"}}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = from_hf_config(p)
    assert (m.hidden_size, m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size, m.attention_bias,
            m.weights_note) == (96, 8, 2, 48, True, "MXFP4 experts")
    p.write_text(json.dumps({**cfg, "num_local_experts": None, "quantization_config": None}))
    m = from_hf_config(p)
    assert (m.is_moe, m.intermediate_size) == (False, 48)


def _rows(two: dict, fused: dict) -> pd.DataFrame:
    """Breakable rows of one cp-2 cell: per mode, rank -> (forward µs, window µs, full µs)."""
    rows = []
    for mode, ranks in (("two-call", two), ("fused", fused)):
        for r, (fw, win, full) in ranks.items():
            rows.append(dict(model="m", backend="torch", timing="breakable", cp_size=2, bs=1, max_extend_len=64,
                             prefix_len=0, extend_lens="64", rank=r, mode=mode, status="ok", reason="",
                             latency_us_median=fw, samples_us=[fw * 0.99, fw, fw * 1.01] * 3,
                             window_layers_us=win, full_layers_us=full))
    return pd.DataFrame(rows)


def test_critical_path_sums_the_slowest_rank_of_each_layer_kind():
    # rank 0 is slow in the window layers, rank 1 in the full ones: every layer waits for the slower rank
    df = _rows({0: (100.0, 70.0, 30.0), 1: (100.0, 30.0, 70.0)}, {0: (90.0, 45.0, 45.0), 1: (90.0, 45.0, 45.0)})
    c = critical_path(df).iloc[0]
    assert c["two_call_us"] == pytest.approx(140.0) and c["fused_us"] == pytest.approx(90.0)
    assert c["speedup"] == pytest.approx(140 / 90) and c["speedup_max"] == pytest.approx(100 / 90)
    assert c["two_call_max_us"] == 100.0 and c["critical_rule"] == "sum over layer kinds of the slowest rank"
    assert c["speedup_ci_low"] <= c["speedup"] <= c["speedup_ci_high"]
    # the same rows as eager timing keep the whole-forward maximum
    c = critical_path(df.assign(timing="eager")).iloc[0]
    assert c["speedup"] == pytest.approx(100 / 90) and c["critical_rule"] == "max over ranks of the forward"


def test_layer_synced_is_never_below_the_slowest_rank():
    meds = [100.0, 80.0, 120.0]
    shares = [[0.2, 0.8], [0.9, 0.1], [0.5, 0.5]]
    v = float(layer_synced(meds, shares))
    assert v == pytest.approx(max(20, 72, 60) + max(80, 8, 60)) and v >= max(meds)
    assert math.isclose(float(layer_synced([50.0, 50.0], [[0.5, 0.5], [0.5, 0.5]])), 50.0)


def test_breaker_findings_on_the_new_options(tmp_path):
    # the default --ep (cp_size x tp) is checked before anything runs, naming itself
    r = cpbench("sweep", "--cp", "2,3", "--bs", "1", "--extend-len", "32", "--timing", "breakable", "--device", "cpu")
    assert r.returncode == 2 and "the default --ep = cp_size x tp = 3 at cp_size 3 does not divide the 128" in r.stderr
    # a config with experts but no top-k still runs eager; breakable names what is missing; top-k > experts too
    base = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "hidden_size": 64, "intermediate_size": 32, "num_local_experts": 8}
    for extra, words in (({}, "has 8 experts but no num_experts_per_tok"),
                         ({"num_experts_per_tok": 16}, "num_experts_per_tok 16 of only 8 experts")):
        p = tmp_path / "config.json"
        p.write_text(json.dumps({**base, **extra}))
        assert from_hf_config(p).is_moe
        r = cpbench("sweep", "--model-config", p, "--cp", "2", "--timing", "breakable", "--device", "cpu")
        assert r.returncode == 2 and words in r.stderr, r.stderr
    # DeepSeek names its routed experts n_routed_experts
    p.write_text(json.dumps({**base, "num_local_experts": None, "n_routed_experts": 8, "num_experts_per_tok": 2,
                             "moe_intermediate_size": 16}))
    assert (from_hf_config(p).num_experts, from_hf_config(p).moe_intermediate_size) == (8, 16)
