"""The fused/two-call verdict of ``cpbench profile --from`` needs evidence of context parallelism: the user's
``--cp``, or a per-layer all-gather in the trace. A count alone says only what it is consistent with."""

import json

import pytest

import tracefactory as tf
from clirun import cpbench


def ranks(*args):
    r = cpbench("profile", "--from", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["ranks"]


@pytest.mark.parametrize("per_layer,calls", [(1, "one call"), (2, "two calls")])
def test_a_count_without_cp_evidence_is_not_a_path(tmp_path, per_layer, calls):
    tf.write_run(tmp_path, world_size=2, layers=36, per_layer=per_layer)
    for r in ranks(tmp_path):
        assert r["cp"] is None and r["cp_evidence"] == "" and r["all_gathers_per_forward"] == [0, 0]
        assert r["verdict"] == (f"{36 * per_layer} attention kernels per forward: consistent with {calls} per layer; "
                                "no evidence of CP in this trace, pass --cp to judge fusion")


@pytest.mark.parametrize("per_layer,path", [(1, "fused path taken"), (2, "two-call")])
def test_the_users_cp_size_is_evidence(tmp_path, per_layer, path):
    tf.write_run(tmp_path, world_size=2, layers=36, per_layer=per_layer)
    for r in ranks(tmp_path, "--cp", "2"):
        assert r["cp"] is True and r["verdict"] == (f"{path}: {36 * per_layer} attention kernels per forward "
                                                    f"({per_layer} per layer; CP: --cp 2)")
    for r in ranks(tmp_path, "--cp", "1"):
        assert r["cp"] is False
        assert r["verdict"].startswith(f"no CP (--cp 1): {36 * per_layer} attention kernels per forward")


@pytest.mark.parametrize("annotate", [True, False], ids=["annotation", "layer-count"])
def test_a_per_layer_all_gather_is_evidence(tmp_path, annotate):
    tf.write_run(tmp_path, world_size=2, layers=36, per_layer=1, forwards=3, annotate=annotate, all_gather=True)
    for r in ranks(tmp_path):
        assert r["all_gathers_per_forward"] == [36, 36, 36] and r["cp"] is True
        assert r["verdict"] == ("fused path taken: 36 attention kernels per forward (1 per layer; CP: 36 all-gathers "
                                "per forward, at least one per layer)")


def test_world_size_one_is_no_cp(tmp_path):
    tf.write(tmp_path / "r0.json.gz", rank=0, world_size=1, layers=36, per_layer=1)
    (r,) = ranks(tmp_path / "r0.json.gz")
    assert r["cp"] is False and r["verdict"] == ("no CP (world size 1 in distributedInfo): 36 attention kernels per "
                                                 "forward, one call per layer")


def test_no_cell_is_compared_without_cp(tmp_path):
    tf.write(tmp_path / "r0.json.gz", rank=0, world_size=1, layers=36, per_layer=1)
    out = json.loads(cpbench("profile", "--from", tmp_path / "r0.json.gz", "--cell", "cp1 bs1 ext64", "--json").stdout)
    assert out["cell"]["status"] == "not compared" and "shows no CP" in out["cell"]["reason"]


def test_cpbench_profile_on_a_cpu_writes_traces_that_from_counts_by_calls(tmp_path):
    """A CPU has no kernels: cpbench's CPU traces are read back by their attention-call ranges (prev/next/combined),
    one mode's files at a time, ranks from the file names."""
    r = cpbench("profile", "--cp", "2", "--extend-len", "64", "--layers", "2", "--device", "cpu", "--out", tmp_path)
    assert r.returncode == 0 and "`cpbench profile --from` reads these traces back by the same calls" in r.stdout
    for mode, per_forward, path in (("two-call", 4, "two-call"), ("fused", 2, "fused path taken")):
        out = ranks(*sorted((tmp_path / "profiles").glob(f"*_{mode}.json.gz")), "--layers", "2", "--cp", "2")
        assert [(x["rank"], x["rank_source"], x["counted"]) for x in out] == [(0, "file name", "attention calls"),
                                                                            (1, "file name", "attention calls")]
        for x in out:
            assert x["attention_kernels_per_forward"] == [per_forward] and x["verdict"].startswith(path)
            assert x["backend"] == "attention calls (cpbench's record_function ranges)"
    console = cpbench("profile", "--from", *sorted((tmp_path / "profiles").glob("*_fused.json.gz")), "--layers", "2")
    assert "no GPU kernel (a CPU run): its attention calls are counted" in console.stdout
