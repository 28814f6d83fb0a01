"""``cpbench profile --from --forward-range``: a range that matches nothing, or matches per-layer ranges, is said
as such (exit 2), never read as a forward; nested matches keep the outermost range."""

import json

import tracefactory as tf
from clirun import cpbench


def layered(tmp_path, per_layer=2, layers=4, forwards=2, layer_names="layer_{}"):
    """A trace whose forwards (ProfilerStep#N) hold one host range per layer, named ``layer_names``."""
    evs = tf.events(layers=layers, per_layer=per_layer, forwards=forwards)
    steps = [e for e in evs if e["cat"] == "user_annotation"]
    gemms = [e for e in evs if e["cat"] == "cuda_runtime"]
    per = len(gemms) // (layers * forwards)  # launch calls per layer: GEMM, attention + memset per call, GEMM
    for f, step in enumerate(steps):
        for i in range(layers):
            first = gemms[(f * layers + i) * per]
            last = gemms[(f * layers + i) * per + per - 1]
            evs.append({"ph": "X", "cat": "user_annotation", "name": layer_names.format(i), "ts": first["ts"] - 0.5,
                        "dur": last["ts"] + 3 - first["ts"]})
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    return path


def test_a_forward_range_that_matches_nothing_is_refused_naming_the_ranges_seen(tmp_path):
    path = layered(tmp_path)
    r = cpbench("profile", "--from", path, "--layers", "4", "--forward-range", "prefill_forward")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--forward-range 'prefill_forward' matched no range in 1 trace" in r.stderr
    assert "ranges seen: 'layer_*' x8, 'ProfilerStep#*' x2" in r.stderr
    ok = json.loads(cpbench("profile", "--from", path, "--layers", "4", "--json").stdout)  # the default: steps
    assert ok["ranks"][0]["attention_kernels_per_forward"] == [8, 8]


def test_per_layer_ranges_are_not_forwards(tmp_path):
    """Two-call (2 per layer): each layer range holds 2 attention kernels, which for a 2-layer model is the fused
    count; named as layers, they are refused."""
    path = layered(tmp_path, layers=2)
    r = cpbench("profile", "--from", path, "--layers", "2", "--cp", "2", "--forward-range", "layer_*")
    assert r.returncode == 2 and "matches per-layer ranges ('layer_0', 'layer_1'), not forwards" in r.stderr, r.stderr
    named_otherwise = layered(tmp_path, layers=4, layer_names="block{}")  # fewer attention kernels than layers
    r = cpbench("profile", "--from", named_otherwise, "--layers", "4", "--cp", "2", "--forward-range", "block*")
    assert r.returncode == 2 and "hold fewer attention kernels than the model's 4 layers (2 in 'block0')" in r.stderr


def test_a_glob_matching_nested_ranges_keeps_the_outermost(tmp_path):
    path = layered(tmp_path, layers=2)
    r = cpbench("profile", "--from", path, "--layers", "2", "--cp", "2", "--forward-range", "*", "--json")
    assert r.returncode == 0, r.stderr
    (rank,) = json.loads(r.stdout)["ranks"]
    assert rank["attention_kernels_per_forward"] == [4, 4] and rank["verdict"].startswith("two-call: 4")
    assert rank["nested_ranges"] == 4  # the layer ranges inside the two steps
    console = cpbench("profile", "--from", path, "--layers", "2", "--cp", "2", "--forward-range", "*").stdout
    assert "4 matched ranges lie inside other matched ranges: the outermost are the forwards" in console
