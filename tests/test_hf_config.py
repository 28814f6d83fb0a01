"""config.json window conventions (layer_types, a period, use_sliding_window + max_window_layers, a bare
sliding_window, none) as Hugging Face transformers derives them, and the attention variants refused by key."""

import json

import pytest

from cpbench.domain.hf_config import from_hf_config
from cpbench.domain.models import with_overrides
from cpbench.errors import CpbenchInputError
from clirun import cpbench

HEADS = {"num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16}


def read(tmp_path, **cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**HEADS, **cfg}))
    return from_hf_config(p)


def refused(tmp_path, **cfg) -> str:
    with pytest.raises(CpbenchInputError) as e:
        read(tmp_path, **cfg)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_gemma3_pattern_windows_five_of_six_layers(tmp_path):
    m = read(tmp_path, model_type="gemma3_text", num_attention_heads=4, num_key_value_heads=1, head_dim=256,
             num_hidden_layers=26, sliding_window=512, sliding_window_pattern=6)
    assert m.window_left_per_layer == ((511,) * 5 + (-1,)) * 4 + (511, 511)
    assert m.window_rule == ("period 6 from sliding_window_pattern (layer i full when i % 6 == 5); 22 of 26 layers "
                             "windowed (sliding_window 512 -> window_left 511)")
    six = with_overrides(m, layers=6)  # --layers 6: layers 0-4 windowed, layer 5 full
    assert six.window_left_per_layer == (511, 511, 511, 511, 511, -1)
    assert six.window_rule.endswith("after --layers/--window: 5 of 6 layers windowed (window_left 511)")


@pytest.mark.parametrize("model_type, key, period", [
    ("gemma3_text", None, 6), ("gemma3", None, 6), ("cohere2", None, 4), ("gemma2", None, 2), ("gpt_oss", None, 2),
    ("somemodel", "_sliding_window_pattern", 3), ("cohere2", "sliding_window_pattern", 2)])
def test_period_from_key_or_model_type_default(tmp_path, model_type, key, period):
    m = read(tmp_path, model_type=model_type, num_hidden_layers=8, sliding_window=64,
             **({key: period} if key else {}))
    assert m.window_left_per_layer == tuple(-1 if i % period == period - 1 else 63 for i in range(8))
    assert f"period {period} from {key or f'model_type {model_type}'}" in m.window_rule
    assert m.has_sinks == (model_type == "gpt_oss")


def test_layer_types_win_over_a_pattern(tmp_path):
    m = read(tmp_path, model_type="gemma3_text", num_hidden_layers=3, sliding_window=8, sliding_window_pattern=6,
             layer_types=["full_attention", "sliding_attention", "full_attention"])
    assert m.window_left_per_layer == (-1, 7, -1) and m.window_rule.startswith("layer_types; 1 of 3 layers")


def test_qwen2_use_sliding_window_and_max_window_layers(tmp_path):
    off = read(tmp_path, model_type="qwen2", num_hidden_layers=4, sliding_window=32768, use_sliding_window=False,
               max_window_layers=28)
    assert off.window_left_per_layer == (-1,) * 4
    assert off.window_rule == "use_sliding_window false (Qwen2 rule; sliding_window not used); all 4 layers full"
    on = read(tmp_path, model_type="qwen2", num_hidden_layers=4, sliding_window=1024, use_sliding_window=True,
              max_window_layers=2)
    assert on.window_left_per_layer == (-1, -1, 1023, 1023)
    assert "max_window_layers 2 (Qwen2 rule: layers >= 2 windowed)" in on.window_rule
    msg = refused(tmp_path, num_hidden_layers=4, sliding_window=1024, use_sliding_window=True)
    assert "max_window_layers" in msg and "missing" in msg
    assert "use_sliding_window must be true or false" in refused(tmp_path, num_hidden_layers=4, sliding_window=8,
                                                                use_sliding_window="yes")
    msg = refused(tmp_path, num_hidden_layers=2, sliding_window=8, use_sliding_window=False,
                  layer_types=["sliding_attention", "full_attention"])
    assert "cannot tell" in msg


def test_mistral_bare_sliding_window_windows_every_layer_and_says_so(tmp_path):
    m = read(tmp_path, model_type="mistral", num_hidden_layers=3, sliding_window=4096)
    assert m.window_left_per_layer == (4095, 4095, 4095)
    assert m.window_rule.startswith("sliding_window without use_sliding_window or a layer pattern (Mistral rule")
    assert "3 of 3 layers windowed (sliding_window 4096 -> window_left 4095)" in m.window_rule
    assert with_overrides(m, window=0).window_left_per_layer == (-1, -1, -1)


def test_null_or_absent_window(tmp_path):
    m = read(tmp_path, num_hidden_layers=2, sliding_window=None, layer_types=["full_attention"] * 2)
    assert m.window_left_per_layer == (-1, -1) and m.window_rule == "layer_types; all 2 layers full"
    assert read(tmp_path, num_hidden_layers=2).window_rule == "no sliding_window; all 2 layers full"
    msg = refused(tmp_path, num_hidden_layers=2, sliding_window=None, layer_types=["sliding_attention"] * 2)
    assert "no sliding_window" in msg
    assert "no sliding_window" in refused(tmp_path, model_type="gemma3_text", num_hidden_layers=6)


def test_head_dim_derived_is_said(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 32, "hidden_size": 4096}))
    m = from_hf_config(p)
    assert m.head_dim == 128 and m.window_rule.endswith("; head_dim 128 = hidden_size / num_attention_heads "
                                                        "(no head_dim key)")


DEEPSEEK_V3 = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "hidden_size": 7168, "kv_lora_rank": 512, "q_lora_rank": 1536,
               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}


@pytest.mark.parametrize("cfg, key", [
    (DEEPSEEK_V3, "kv_lora_rank"),
    ({**DEEPSEEK_V3, "model_type": "deepseek_v2", "q_lora_rank": None, "kv_lora_rank": None}, "qk_rope_head_dim"),
    ({"num_hidden_layers": 2, "q_lora_rank": 64}, "q_lora_rank"),
    ({"num_hidden_layers": 2, "v_head_dim": 32}, "v_head_dim"),
    ({"model_type": "gemma2", "num_hidden_layers": 2, "sliding_window": 8, "attn_logit_softcapping": 50.0},
     "attn_logit_softcapping"),
    ({"model_type": "llama4_text", "num_hidden_layers": 2, "attention_chunk_size": 8192}, "attention_chunk_size"),
    ({"model_type": "gemma3_text", "num_hidden_layers": 2, "sliding_window": 8, "use_bidirectional_attention": True},
     "use_bidirectional_attention"),
    ({"num_hidden_layers": 2, "hybrid_override_pattern": "M*"}, "hybrid_override_pattern"),
    ({"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]}, "linear_attention"),
    ({"num_hidden_layers": 2, "sliding_window": 8, "sliding_window_pattern": 2, "_sliding_window_pattern": 3},
     "disagree"),
])
def test_unmodelled_attention_is_refused_by_key(tmp_path, cfg, key):
    msg = refused(tmp_path, **cfg)
    assert key in msg


@pytest.mark.parametrize("key, value", [("head_dim", "128"), ("num_key_value_heads", 0), ("hidden_size", "x")])
def test_non_integer_sizes_are_one_line_errors(tmp_path, key, value):
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 1024}
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**cfg, key: value}))
    with pytest.raises(CpbenchInputError, match=key):
        from_hf_config(p)


def test_deepseek_would_have_run_with_a_shape_it_does_not_have(tmp_path):
    """hidden / heads = 56 is not a head size of DeepSeek-V3 (192 for q/k, 128 for v): refused, never run."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps(DEEPSEEK_V3))
    r = cpbench("sweep", "--model-config", p, "--cp", "2", "--bs", "1", "--seq", "32", "--out", tmp_path / "run")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "kv_lora_rank" in r.stderr
    assert not (tmp_path / "run").exists()


def test_sweep_says_the_rule_and_records_it(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**HEADS, "model_type": "mistral", "num_hidden_layers": 2, "sliding_window": 16}))
    out = tmp_path / "run"
    r = cpbench("sweep", "--model-config", p, "--cp", "2", "--bs", "1", "--seq", "32", "--budget-ms", "5",
                "--no-report", "--no-profile", "--out", out)
    assert r.returncode == 0, r.stderr[-1500:]
    note = [x for x in r.stderr.splitlines() if x.startswith("note: model config")]
    assert len(note) == 1 and "(Mistral rule" in note[0] and "2 of 2 layers windowed" in note[0]
    man = json.loads((out / "manifest.json").read_text())
    assert man["config"]["model"]["window_rule"] == note[0].split(": ", 2)[2]
    assert man["config"]["model"]["window_left_per_layer"] == [15, 15]
    from cpbench.measure.env import code_sha256

    assert man["code_sha256"] == code_sha256() and "git_commit" in man  # every manifest names its code


def test_a_config_with_a_utf8_byte_order_mark_is_read(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps({**HEADS, "num_hidden_layers": 2}).encode())
    assert from_hf_config(p).num_kv_heads == 1


def _full(spec) -> list[int]:
    return [i for i, w in enumerate(spec.window_left_per_layer) if w < 0]


@pytest.mark.parametrize("cfg, layers, full", [
    # Gemma-3: layer i full when i % 6 == 5 (the config has 8 layers; tiling gave [5, 13] at 18)
    ({"model_type": "gemma3_text", "num_hidden_layers": 8, "sliding_window": 512, "sliding_window_pattern": 6},
     18, [5, 11, 17]),
    ({"model_type": "gemma3_text", "num_hidden_layers": 8, "sliding_window": 512}, 4, []),
    # Qwen2: the first max_window_layers layers full, the rest windowed (tiling made layers 6, 7 full)
    ({"model_type": "qwen2", "num_hidden_layers": 6, "sliding_window": 4096, "use_sliding_window": True,
      "max_window_layers": 4}, 8, [0, 1, 2, 3]),
    ({"model_type": "qwen2", "num_hidden_layers": 6, "sliding_window": 4096, "use_sliding_window": True,
      "max_window_layers": 4}, 3, [0, 1, 2]),
    # Cohere2: period 4 (tiling gave [3] at 9 layers of a 4-layer config)
    ({"model_type": "cohere2", "num_hidden_layers": 4, "sliding_window": 4096}, 9, [3, 7]),
    # an explicit list that repeats is its unit, at any count
    ({"model_type": "gpt_oss", "num_hidden_layers": 4, "sliding_window": 128,
      "layer_types": ["sliding_attention", "full_attention"] * 2}, 7, [1, 3, 5]),
])
def test_a_configs_window_rule_holds_at_any_layer_count(tmp_path, cfg, layers, full):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, **cfg}))
    spec = with_overrides(from_hf_config(p), layers=layers)
    assert spec.num_layers == layers and _full(spec) == full


def test_an_explicit_list_without_a_pattern_is_refused_at_another_count(tmp_path):
    p = tmp_path / "config.json"
    types = ["full_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]
    p.write_text(json.dumps({"num_hidden_layers": 5, "num_attention_heads": 8, "head_dim": 64, "sliding_window": 64,
                             "layer_types": types}))
    assert _full(with_overrides(from_hf_config(p), layers=5)) == [0, 4]
    with pytest.raises(CpbenchInputError, match="lists 5 layers with no repeating pattern"):
        with_overrides(from_hf_config(p), layers=6)
