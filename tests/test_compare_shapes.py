"""``compare`` never pairs runs of different model shapes: a model read from --model-config is named by
its shape (two configs sharing model_type no longer share a name), and two runs recording different
shapes under one name are refused in one line."""

import json

import pytest

from cpbench.results.compare import compare_runs
from cpbench.cli.options import resolve_model
from cpbench.errors import CpbenchInputError
from clirun import cpbench
from runfactory import make_rows, write_run

LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "num_key_value_heads": 1, "head_dim": 16}


def _config(tmp_path, name, **over):
    p = tmp_path / name / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps({**LLAMA, **over}), encoding="utf-8")
    return p


def _resolve(path, **over):
    kw = dict(layers=None, heads=None, kv_heads=None, head_dim=None, window=None, sinks=None, page_size=None)
    return resolve_model(None, path, **{**kw, **over})


def test_a_config_model_is_named_by_its_shape(tmp_path):
    small = _resolve(_config(tmp_path, "a", num_attention_heads=4))
    big = _resolve(_config(tmp_path, "b", num_attention_heads=32))
    assert small.name == "llama:L2-q4-kv1-d16-full" and big.name == "llama:L2-q32-kv1-d16-full"
    windowed = _resolve(_config(tmp_path, "c", num_attention_heads=4, model_type="mistral", sliding_window=16))
    assert windowed.name == "mistral:L2-q4-kv1-d16-w16x2"
    assert _resolve(_config(tmp_path, "d", num_attention_heads=4), layers=4).name == "llama:L4-q4-kv1-d16-full"


def _model(heads):
    return {"name": "llama", "num_layers": 2, "num_q_heads": heads, "num_kv_heads": 1, "head_dim": 16,
            "window_left_per_layer": [-1, -1], "has_sinks": False, "page_size": 64}


def test_compare_refuses_one_name_with_two_shapes(tmp_path):
    rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",), models=("llama",), noise=0)
    base = write_run(tmp_path / "base", rows, manifest_over={"config": {"model": _model(4)}})
    new = write_run(tmp_path / "new", rows, manifest_over={"config": {"model": _model(32)}})
    with pytest.raises(CpbenchInputError, match=r"different models under the same name 'llama' \(num_q_heads 4 vs 32\)"):
        compare_runs(base, new)
    r = cpbench("compare", base, new)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "num_q_heads 4 vs 32" in r.stderr
    same = write_run(tmp_path / "same", rows, manifest_over={"config": {"model": _model(4)}})
    result, _, _ = compare_runs(base, same)
    assert result.exit_code == 0
