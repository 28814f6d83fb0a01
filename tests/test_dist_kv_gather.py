"""KV all-gather of zigzag CP prefill: plan geometry (no processes), then a real gloo launch under
torchrun (4 ranks: cp_size 1, 2 and 4). A rank that dies or stops around a collective is checked on
cpbench's own launches (test_dist_sweep.py, test_dist_faults.py): the group timeouts are the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cpbench.ranks import process_groups as groups
from cpbench.ranks.kv_gather import (MODES, allocate_gather_buffers, build_gather_plan, gather_bytes,
                                     write_kv)
from cpbench.domain.geometry import all_ranks
from cpbench.domain.ring import bus_bandwidth_gbps
from cpbench.kernels.kv import build_block_tables, token_slots
from cpbench.errors import CpbenchInputError

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "dist_scripts" / "kv_gather_check.py"
BATCHES = [([11, 13], [8, 14]), ([97, 130, 64], [8, 0, 45]), ([16], [0]), ([40, 9, 33], [3, 1, 0])]


def _plan(extend, prefix, cp_size, page_size=16, **kw):
    seq = [e + p for e, p in zip(extend, prefix)]
    table, num_pages = build_block_tables(seq, page_size, seed=3)
    return build_gather_plan(extend, prefix, cp_size, page_size, table, "cpu", **kw), table, num_pages


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cp_size", [1, 2, 4])
@pytest.mark.parametrize("extend,prefix", BATCHES)
def test_plan_covers_every_token_once_and_matches_geometry(extend, prefix, cp_size):
    if min(extend) < 2 * cp_size:
        with pytest.raises(CpbenchInputError, match="not CP-eligible"):
            _plan(extend, prefix, cp_size)
        return
    plan, table, _ = _plan(extend, prefix, cp_size)
    seen = [pos for r in range(cp_size) for pos in plan.positions(r)]
    assert sorted(seen) == [(s, i) for s, e in enumerate(extend) for i in range(e)]
    for g in all_ranks(extend, prefix, cp_size):
        want = [(seg.request, seg.q_start + j) for seg in g.prev_segments() + g.next_segments()
                for j in range(seg.q_len)]
        assert plan.positions(g.rank) == want
        assert plan.tokens_per_rank[g.rank] == g.tokens_logical
    assert plan.max_tokens == max(plan.tokens_per_rank)
    slots = torch.cat([token_slots(table[s], p + e, 16)[p:] for s, (e, p) in enumerate(zip(extend, prefix))])
    assert torch.equal(plan.slots, slots)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cp_size", [2, 4])
def test_emulated_gather_and_write_restore_token_order(cp_size):
    """The all-gather emulated by concatenating padded local rows: gathered_index and slots put every
    token back in place, exactly, and write nothing else."""
    extend, prefix = [97, 130, 64], [8, 0, 45]
    plan, _, num_pages = _plan(extend, prefix, cp_size, pad_to_multiple=2 * cp_size)
    assert plan.max_tokens % (2 * cp_size) == 0
    assert plan.max_tokens == all_ranks(extend, prefix, cp_size)[0].tokens_padded
    k_all = torch.randn(plan.total_tokens, 2, 8)
    padded = torch.zeros(cp_size * plan.max_tokens, 2, 8)
    for r in range(cp_size):
        padded[r * plan.max_tokens:r * plan.max_tokens + plan.tokens_per_rank[r]] = plan.local_rows(r, k_all)
    k_full = padded.index_select(0, plan.gathered_index)
    assert torch.equal(k_full, k_all)
    k_cache, v_cache = torch.zeros(num_pages, 16, 2, 8), torch.zeros(num_pages, 16, 2, 8)
    write_kv(plan, k_full, -k_full, k_cache, v_cache)
    flat = k_cache.view(-1, 2, 8)
    assert torch.equal(flat[plan.slots], k_all) and torch.equal(v_cache.view(-1, 2, 8)[plan.slots], -k_all)
    flat[plan.slots] = 0
    assert not k_cache.any()


@pytest.mark.timeout(120)
def test_bad_input_is_one_line():
    table, _ = build_block_tables([19, 27], 16)
    cases = [
        lambda: build_gather_plan([11, 13], [8, 14], 8, 16, table, "cpu"),  # 11 < 2*8
        lambda: build_gather_plan([11, 13], [8, 14], 2, 16, table[:1], "cpu"),
        lambda: build_gather_plan([11, 13], [8, 14], 2, 16, table[:, :1], "cpu"),
        lambda: build_gather_plan([11, 13], [8, 14], 2, 12, table, "cpu"),
        lambda: groups.cp_subgroups(4, 3),
        lambda: groups.cp_subgroups(4, 0),
        lambda: bus_bandwidth_gbps(100, 2, 0.0),
    ]
    plan = build_gather_plan([11, 13], [8, 14], 2, 16, table, "cpu")
    cases += [lambda: gather_bytes(plan, 2, 8, 2, "ring"),
              lambda: allocate_gather_buffers(plan, 2, 8, torch.float32, "cpu", "both"),
              lambda: write_kv(plan, torch.zeros(24, 2, 8), torch.zeros(24, 2, 8),
                               torch.zeros(1, 16, 2, 8), torch.zeros(1, 16, 2, 8))]
    for case in cases:
        with pytest.raises(CpbenchInputError) as e:
            case()
        assert "\n" not in str(e.value)


@pytest.mark.timeout(120)
def test_bytes_and_bus_bandwidth():
    plan, _, _ = _plan([11, 13], [8, 14], 2)  # 12 rows per rank
    for mode in MODES:
        assert gather_bytes(plan, 2, 8, 2, mode) == 2 * 12 * 2 * 16 * 2
    assert bus_bandwidth_gbps(8_000_000, 8, 1000.0) == pytest.approx(7 / 8 * 8.0)
    assert bus_bandwidth_gbps(1000, 1, 1.0) == 0.0


def _torchrun(nproc: int, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           str(SCRIPT), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_gloo_gather_writes_full_kv_exactly():
    """A world of 4 runs cp_size 1, 2 and 4: a group of every rank, and groups that leave ranks out."""
    nproc = 4
    proc = _torchrun(nproc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, proc.stdout
    out = json.loads(lines[0])
    assert out["world_size"] == nproc and out["ok"] and out["helpers_ok"]
    cells = {(r["cp_size"], r["mode"], r["rank"]) for r in out["rows"]}
    want = {(c, m, r) for c in range(1, nproc + 1) if nproc % c == 0 for m in MODES for r in range(c)}
    assert cells == want  # ranks >= cp_size sat the cell out
    assert all(r["ok"] for r in out["rows"])
