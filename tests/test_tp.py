"""Attention tensor parallelism: one GPU's heads at TP 2/4/8 for every preset, replication and refusals."""

import json

import pytest

from cpbench.domain.models import PRESETS, get_preset, with_overrides
from cpbench.domain.tp import split_heads, tp_heads
from cpbench.errors import CpbenchInputError
from clirun import cpbench

# (q heads, kv heads) per GPU: heads / tp, max(1, kv heads / tp)
EXPECTED = {
    "gpt-oss-120b": {1: (64, 8), 2: (32, 4), 4: (16, 2), 8: (8, 1)},
    "gpt-oss-20b": {1: (64, 8), 2: (32, 4), 4: (16, 2), 8: (8, 1)},
    "qwen3-30b-a3b": {1: (32, 4), 2: (16, 2), 4: (8, 1), 8: (4, 1)},  # 4 KV heads at TP 8: each on 2 GPUs
    "llama-3.1-8b": {1: (32, 8), 2: (16, 4), 4: (8, 2), 8: (4, 1)},
}


def test_every_preset_is_covered():
    assert set(EXPECTED) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_split_and_replication(name, tp):
    spec = split_heads(get_preset(name), tp)
    assert (spec.num_q_heads, spec.num_kv_heads) == EXPECTED[name][tp]
    assert spec.name == name and spec.head_dim == get_preset(name).head_dim
    assert spec.window_left_per_layer == get_preset(name).window_left_per_layer
    assert spec.num_q_heads % spec.num_kv_heads == 0  # still GQA on the GPU


def test_replication_counts():
    assert tp_heads(64, 8, 16) == (4, 1)  # 8 KV heads on 16 GPUs: 2 replicas each
    assert tp_heads(8, 1, 8) == (1, 1)  # MQA: the one KV head on every GPU


@pytest.mark.parametrize("q,kv,tp,needle", [
    (64, 8, 3, "does not divide the model's 64 query heads"),
    (48, 12, 8, "does not divide the model's 12 KV heads"),
    (48, 6, 8, "not a multiple of the model's 6 KV heads"),
    (64, 8, 0, "--tp must be an integer in [1, 1024]"),
])
def test_refusals(q, kv, tp, needle):
    with pytest.raises(CpbenchInputError) as e:
        tp_heads(q, kv, tp)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_refusal_of_an_overridden_model():
    spec = with_overrides(get_preset("llama-3.1-8b"), heads=24, kv_heads=8)
    with pytest.raises(CpbenchInputError, match="--tp 16 does not divide the model's 24 query heads"):
        split_heads(spec, 16)


def test_cli_refuses_in_one_line(tmp_path):
    r = cpbench("sweep", "--device", "cpu", "--tp", "3", "--out", str(tmp_path / "r"), "--no-report")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "--tp 3 does not divide" in r.stderr


def test_models_and_profile_show_one_gpus_heads(tmp_path):
    r = cpbench("models", "--tp", "4")
    assert r.returncode == 0 and "tp_size 4" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if "qwen3-30b-a3b" in ln)
    cells = [c.strip() for c in line.strip().strip("│").split("│")] if "│" in line else line.split()
    assert cells[1:4] == ["48", "8", "1"]  # layers, q heads, kv heads (boxed or plain table)
    p = cpbench("profile", "--device", "cpu", "--cp", "2", "--bs", "1", "--seq", "16", "--layers", "2", "--tp", "8",
                "--json", "--out", str(tmp_path / "p"))
    assert p.returncode == 0, p.stderr[-500:]
    assert json.loads(p.stdout)["tp_size"] == 8
