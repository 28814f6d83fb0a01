"""A profile stopped part-way (a killed ``--launch torchrun``, Ctrl-C) keeps the counts of the cells it finished:
profile.json is rewritten, atomically, after each cell (``"partial": true`` until the last write). The
interruption is simulated at the function level: the next cell raises KeyboardInterrupt."""

import json

import pytest
import torch

from clirun import cpbench

TINY = ["--layers", "2", "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--page-size", "16"]


def _spec():
    from cpbench.domain.models import get_preset, with_overrides

    return with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=4, kv_heads=1, head_dim=16, page_size=16)


def test_a_torchrun_profile_stopped_after_its_first_cell_keeps_that_cell(tmp_path, monkeypatch):
    """The rank-0 body of a torchrun profile (cli.profile._profile_ranks), in one process on a LocalGroup: the
    second cell is interrupted; profile.json holds the first cell's counts and says it is partial."""
    from cpbench.cli.profile import _profile_ranks
    from cpbench.domain.cells import Batch, plan_cells
    from cpbench.ranks.group import LocalGroup
    from cpbench.commands.config import SweepConfig
    from cpbench.commands.runner import Runner

    run_cell = Runner.run_cell

    def stop_at_48(self, cell, *a, **kw):
        if cell.max_extend_len == 48:
            raise KeyboardInterrupt  # as a kill of the launch while the second cell runs
        return run_cell(self, cell, *a, **kw)

    monkeypatch.setattr(Runner, "run_cell", stop_at_48)
    batches = [Batch((40,), (0,)), Batch((48,), (0,))]
    cells = plan_cells([2], batches)
    cfg = SweepConfig(model=_spec(), cp_sizes=(2,), batches=batches, backends=("torch",), device=torch.device("cpu"),
                      timings=("eager",), budget_ms=1.0, warmup=1, gather="none")  # as the profile command builds it
    report = {"model": "tiny", "backend": "torch", "counted": "calls", "cells": []}
    with pytest.raises(KeyboardInterrupt):
        _profile_ranks(cfg, cells, LocalGroup(), report, tmp_path, tmp_path / "profiles")
    saved = json.loads((tmp_path / "profile.json").read_text())
    assert saved["partial"] is True and [c["max_extend_len"] for c in saved["cells"]] == [40]
    cell = saved["cells"][0]
    assert cell["status"] == "ok" and (cell["total"]["two-call"], cell["total"]["fused"]) == (8, 4)  # 2 layers, 2 ranks
    assert not (tmp_path / "profile.json.tmp").exists()


def test_a_profile_stopped_after_its_first_cell_keeps_that_cell(tmp_path, monkeypatch):
    """The same in a simulated profile (cpbench profile, ranks in this process): Ctrl-C in the second cell."""
    from cpbench.commands import profiling

    real = profiling.profile_cell

    def stop_at_48(model, cell, **kw):
        if cell.max_extend_len == 48:
            raise KeyboardInterrupt
        return real(model, cell, **kw)

    monkeypatch.setattr(profiling, "profile_cell", stop_at_48)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = cpbench("profile", "--cp", "2", "--extend-len", "40,48", "--out", tmp_path, *TINY)
    assert r.returncode == 130, r.stderr
    saved = json.loads((tmp_path / "profile.json").read_text())
    assert saved["partial"] is True and [(c["max_extend_len"], c["status"]) for c in saved["cells"]] == [(40, "ok")]


def test_a_finished_profile_is_not_partial(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = cpbench("profile", "--cp", "2", "--extend-len", "40,48", "--out", tmp_path, *TINY)
    assert r.returncode == 0, r.stderr
    saved = json.loads((tmp_path / "profile.json").read_text())
    assert "partial" not in saved and [c["max_extend_len"] for c in saved["cells"]] == [40, 48]
