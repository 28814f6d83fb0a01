"""Run under torchrun (gloo by default, ``--backend nccl`` on GPUs): every rank gathers its zigzag K/V rows (packed and separate) at every
cp_size dividing world_size, writes them into a zeroed paged cache and checks the extend slots hold
the full K/V exactly and nothing else was written. Rank 0 prints one JSON line; exit 1 on a mismatch.

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 tests/dist_scripts/kv_gather_check.py
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from cpbench.ranks import process_groups as groups
from cpbench.ranks.kv_gather import (MODES, allocate_gather_buffers, build_gather_plan, gather_bytes, gather_kv,
                                     write_kv)
from cpbench.kernels.kv import build_block_tables


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def check_cell(rank: int, cp_size: int, args, device: torch.device) -> list[dict]:
    seq_lens = [e + p for e, p in zip(args.extend, args.prefix)]
    block_tables, num_pages = build_block_tables(seq_lens, args.page_size, seed=cp_size)
    plan = build_gather_plan(args.extend, args.prefix, cp_size, args.page_size, block_tables, device)
    gen = torch.Generator().manual_seed(1000 + cp_size)
    shape = (plan.total_tokens, args.hkv, args.head_dim)
    k_all, v_all = (torch.randn(shape, generator=gen).to(device) for _ in range(2))
    k_local, v_local = plan.local_rows(rank, k_all), plan.local_rows(rank, v_all)
    group = groups.cp_subgroups(groups._info().world_size, cp_size)
    rows = []
    for mode in MODES:
        bufs = allocate_gather_buffers(plan, args.hkv, args.head_dim, torch.float32, device, mode)
        ok = True
        for _ in range(2):  # reused buffers give the same answer
            k_full, v_full = gather_kv(plan, k_local, v_local, group, mode, bufs)
            ok &= torch.equal(k_full, k_all) and torch.equal(v_full, v_all)
        k_cache = torch.zeros(num_pages, args.page_size, args.hkv, args.head_dim, device=device)
        v_cache = torch.zeros_like(k_cache)
        write_kv(plan, k_full, v_full, k_cache, v_cache)
        for cache, want in ((k_cache, k_all), (v_cache, v_all)):
            flat = cache.view(-1, args.hkv, args.head_dim)
            ok &= torch.equal(flat[plan.slots], want)
            flat[plan.slots] = 0
            ok &= not bool(cache.any())  # nothing written outside the extend slots
        rows.append({"rank": rank, "cp_size": cp_size, "mode": mode, "ok": bool(ok),
                     "tokens": plan.tokens_per_rank[rank], "max_tokens": plan.max_tokens,
                     "gather_bytes": gather_bytes(plan, args.hkv, args.head_dim, 4, mode)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--extend", type=_ints, default=[97, 130, 64])
    ap.add_argument("--prefix", type=_ints, default=[8, 0, 45])
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--hkv", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--backend", default="gloo", help="gloo (cpu tensors) or nccl (cuda:<local_rank>)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    info = groups.init_process_group_from_env(args.backend, args.timeout)
    rows: list[dict] = []
    for cp_size in [c for c in range(1, info.world_size + 1) if info.world_size % c == 0]:
        group = groups.cp_subgroups(info.world_size, cp_size)  # every rank, same order
        if groups.in_group(group):
            rows += check_cell(info.rank, cp_size, args, info.device)
    top = groups.max_over_ranks(info.rank)
    top_f = groups.max_over_ranks(info.rank + 0.5)
    token = groups.broadcast_object({"from": info.rank} if info.rank == 0 else None)
    everyone = groups.all_gather_object_gloo(rows)
    helpers_ok = (top == info.world_size - 1 and isinstance(top, int) and top_f == top + 0.5
                  and token == {"from": 0})
    all_ok = groups.all_gather_object_gloo(helpers_ok)
    groups.destroy()
    groups.destroy()  # safe twice
    flat = [r for per_rank in everyone for r in per_rank]
    ok = all(r["ok"] for r in flat) and all(all_ok)
    if info.rank == 0:
        print(json.dumps({"world_size": info.world_size, "ok": ok, "helpers_ok": all(all_ok),
                          "rows": flat}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
