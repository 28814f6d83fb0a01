"""A --resume refusal names the option a user typed (--dtype, --nproc-per-node, the batch options), never
the manifest's internal config key (``batches``, ``tp_size``, ``world_size``)."""

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from cpbench.errors import CpbenchInputError
from cpbench.results.schema import FIXED_ON_RESUME
from cpbench.results.store import RunDir
from cpbench.commands.resume_options import FLAGS, phrase
from cpbench.commands.manifest import config_dict
from cpbench.commands.resume import check_resume_config
from cpbench.domain.models import with_overrides
from sweepcfg import TINY_MODEL, grid_config

SIM = SimpleNamespace(launch="simulated", world_size=1)
MIX = [[[8, 24], [0, 0]], [[16, 16], [0, 0]]]  # two drawn batches of 2 requests


def _refusal(tmp_path, old, new, old_group=SIM, new_group=SIM) -> str:
    (tmp_path / "manifest.json").write_text(json.dumps({"config": config_dict(old, old_group)}))
    with pytest.raises(CpbenchInputError) as e:
        check_resume_config(RunDir(tmp_path), new, new_group)
    return str(e.value)


def _mix(batches, prefix_hit=None):
    return grid_config(cells_from=(("bs_list", [2]), ("extend_len_list", [64]), ("extend_lens", None), ("prefix", 0),
                                   ("batches", batches), ("lengths", "dist:uniform:8:24"), ("trace", None),
                                   ("prefix_hit", prefix_hit)))


@pytest.mark.parametrize("fields,needle", [
    (dict(dtype="fp16"), "was measured with --dtype fp32, not --dtype fp16"),
    (dict(seed=1), "was measured with --seed 0, not --seed 1"),
    (dict(tp_size=2), "was measured with --tp 1, not --tp 2"),
    (dict(gather="packed"), "was measured with --gather none, not --gather packed"),
    (dict(fused_order="interleaved"), "was measured with --fused-order prev-next, not --fused-order "
                                      "interleaved"),
    (dict(context_len=128), "was measured with --context-len (default: the longest sequence), not "
                            "--context-len 128"),
    (dict(check=False), "was measured with --check, not --no-check"),
    (dict(cp_min_extend="upstream"), "was measured with --cp-min-extend pr, not --cp-min-extend upstream"),
    (dict(cp_min_tokens=100), "was measured with --cp-min-tokens 0, not --cp-min-tokens 100"),
    (dict(swa_pool=True), "was measured with no --swa-pool, not --swa-pool"),
])
def test_each_run_option_is_named_as_typed(tmp_path, fields, needle):
    msg = _refusal(tmp_path, grid_config(), grid_config(**fields))
    assert msg == f"--resume: {tmp_path} {needle}: resume with the same options or pick another --out"


def test_the_prefix_and_the_model(tmp_path):
    assert "was measured with --prefix 0, not --prefix 16:" in _refusal(tmp_path, grid_config(), grid_config(prefix=16))
    four = with_overrides(TINY_MODEL, layers=4)
    msg = _refusal(tmp_path, grid_config(), grid_config(model=four))
    assert f"was measured with model {TINY_MODEL.name}, not model {four.name} (set by --model/--model-config, --layers/" in msg
    edited = replace(TINY_MODEL, head_dim=32)  # a config.json edited between runs: same name, other shape
    assert (f"with model {TINY_MODEL.name} (head_dim 16), not model {TINY_MODEL.name} (head_dim 32)"
            in _refusal(tmp_path, grid_config(), grid_config(model=edited)))


def test_the_planned_batches_name_the_cell_options(tmp_path):
    msg = _refusal(tmp_path, _mix(MIX), _mix(MIX[:1]))
    assert "different batches" not in msg
    assert ("was measured with other request batches (2 batches of 4 requests in all; this sweep plans 1 batch of "
            "2 requests in all), which come from --bs/--seq/--extend-lens/--lengths/--trace/--batches/--prefix-hit: "
            "resume with the same options") in msg
    grid = _refusal(tmp_path, grid_config(), _mix(MIX))
    assert "(a --bs x --seq grid; this sweep plans 2 batches of 4 requests in all)" in grid
    hit = _refusal(tmp_path, _mix(MIX), _mix(MIX, prefix_hit=0.5))
    assert "was measured with --prefix-hit (none), not --prefix-hit 0.5:" in hit


def test_the_launch_and_its_size(tmp_path):
    torchrun = SimpleNamespace(launch="torchrun", world_size=2)
    assert ("was measured with --launch simulated, not --launch torchrun:"
            in _refusal(tmp_path, grid_config(), grid_config(), SIM, torchrun))
    assert ("was measured with --nproc-per-node 2, not --nproc-per-node 4:"
            in _refusal(tmp_path, grid_config(), grid_config(), torchrun, SimpleNamespace(launch="torchrun", world_size=4)))


def test_every_fixed_key_has_a_user_facing_name():
    for key in (*FIXED_ON_RESUME, "launch", "world_size"):
        assert key in FLAGS or key in ("model", "batches", "check", "swa_pool"), key
        assert phrase(key, 1).split()[0] != key or key == "model", key


@pytest.mark.parametrize("old,new,needle", [
    (dict(bs_list=(1, 4, 16)), dict(bs_list=(1, 4)), "was measured with --bs 1,4,16, not --bs 1,4"),
    (dict(bs_list=(1,)), dict(bs_list=(1, 4)), "was measured with --bs 1, not --bs 1,4"),
    (dict(extend_len_list=(64,)), dict(extend_len_list=(64, 128)),
     "was measured with --extend-len 64, not --extend-len 64,128"),
    (dict(), dict(cp_sizes=(2, 4)), "was measured with --cp 2, not --cp 2,4"),
    (dict(timings=("breakable", "eager"), layer_rest_us=0.0), dict(timings=("breakable",), layer_rest_us=0.0),
     "was measured with --timing breakable,eager, not --timing breakable"),
    (dict(), dict(modes=("fused",)), "was measured with --mode two-call,fused, not --mode fused"),
])
def test_a_resume_with_another_grid_is_refused_naming_the_option(tmp_path, old, new, needle):
    """#49: a --resume with other --bs/--extend-len/--cp/--timing/--mode than the run's silently added (or dropped)
    cells; it is refused, naming the option as typed and both values."""
    msg = _refusal(tmp_path, grid_config(**{"timings": ("eager",), **old}), grid_config(**{"timings": ("eager",), **new}))
    assert msg == f"--resume: {tmp_path} {needle}: resume with the same options or pick another --out"


def test_a_grid_resumed_as_one_explicit_batch_is_refused(tmp_path):
    lens = grid_config(cells_from=(("bs_list", [1]), ("extend_len_list", [64]), ("extend_lens", [64]), ("prefix", 0)))
    assert ("was measured with --extend-lens (none: a --bs x --extend-len grid), not --extend-lens 64:"
            in _refusal(tmp_path, grid_config(), lens))
    # the same explicit batch resumes, whatever default --bs/--extend-len lists it recorded beside it
    other_defaults = grid_config(cells_from=(("bs_list", [1, 4, 16]), ("extend_len_list", [2048]),
                                             ("extend_lens", [64]), ("prefix", 0)))
    (tmp_path / "manifest.json").write_text(json.dumps({"config": config_dict(lens, SIM)}))
    check_resume_config(RunDir(tmp_path), other_defaults, SIM)


def test_a_resume_of_the_same_grid_and_of_a_manifest_without_the_lists_is_let_through(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"config": config_dict(grid_config(), SIM)}))
    check_resume_config(RunDir(tmp_path), grid_config(), SIM)
    old = {k: v for k, v in config_dict(grid_config(), SIM).items() if k not in ("extend_len_list", "extend_lens")}
    (tmp_path / "manifest.json").write_text(json.dumps({"config": old}))  # a manifest from before those keys
    check_resume_config(RunDir(tmp_path), grid_config(extend_len_list=(64, 128)), SIM)


def test_a_config_built_without_its_options_is_checked_by_the_cells_it_plans(tmp_path):
    """A SweepConfig built in Python without ``cells_from`` records no --bs list: the cells it plans are compared."""
    from cpbench.commands.manifest import planned_cells

    old, new = grid_config(cells_from=()), grid_config(bs_list=(1, 2), cells_from=())
    (tmp_path / "manifest.json").write_text(json.dumps({"config": config_dict(old, SIM),
                                                        "planned_cells": planned_cells(old.cells(), old.timings)}))
    check_resume_config(RunDir(tmp_path), old, SIM)  # the same cells
    with pytest.raises(CpbenchInputError) as e:
        check_resume_config(RunDir(tmp_path), new, SIM)
    assert str(e.value) == (f"--resume: {tmp_path} planned 1 cell, this sweep plans 2 (cp2 bs2 extend64 is not in the "
                            "run's plan): resume with the same options or pick another --out")
