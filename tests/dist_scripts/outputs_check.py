"""Run under torchrun (gloo on CPU with the torch reference; NCCL on GPUs with another backend, e.g.
``outputs_check.py packed flashinfer-fa3``): every rank's attention outputs with the per-layer K|V all-gather
equal, bit for bit in fp32, the outputs of the same rank simulated in one process without it. The first
argument is a gather mode or a comma-separated list of them (``packed,separate``: both in one launch);
a mode ending in ``+swa-pool`` runs with the SWA pool (``packed,packed+swa-pool``: without and with it).

Each rank's paged cache starts with the extend K/V of the whole batch zeroed (a rank only holds its own
tokens), so attention reads the right keys only if the gather and the paged write put them there.
With ``--swa-pool`` the window layers read the SWA pool, whose extend K/V is zeroed too: they match only
if the gather's paged write puts their K/V at the SWA table's slots of the SWA pool.
Rank 0 prints one JSON line: {"equal": {"<gather> <extend> <prefix> <mode> r<rank>": bool, ...}, "world_size": N}.
"""

import json
import sys

import torch

from cpbench.kernels.backends import get_backend
from cpbench.ranks import process_groups as groups
from cpbench.ranks.torchrun_group import TorchrunGroup
from cpbench.domain.geometry import all_ranks
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.workload import build_cell, rank_work


def outputs(model, extend, prefix, cp, rank, mode, backend, device, group=None, swa_pool=False):
    dtype = torch.float32 if backend == "torch" else torch.bfloat16
    cell = build_cell(model, extend, prefix, page_size=model.page_size, dtype=dtype, device=device, seed=3,
                      swa_pool=swa_pool)
    work = rank_work(cell, all_ranks(extend, prefix, cp)[rank])
    prep = get_backend(backend).prepare(work, mode)
    if group is not None:
        group.begin_cell(f"cp{cp} {extend}", cp)
        exchange = group.exchange(work, mode)
        exchange.check()  # zeroes the extend K/V, then one gather + paged write must restore it
        prep = prep.with_steps_before(exchange)
    prep.forward()
    return {w: o.clone() for w, o in prep.outputs.items()}


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--swa-pool"]
    swa_pool = "--swa-pool" in sys.argv[1:]
    gathers = args[0].split(",")
    backend = args[1] if len(args) > 1 else "torch"
    torch.set_num_threads(1)
    info = groups.init_process_group_from_env("gloo" if backend == "torch" else "nccl", 60)
    model = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=4, kv_heads=2, page_size=16)
    if backend != "torch":
        model = with_overrides(get_preset("gpt-oss-120b"), layers=2)  # the real shape for the GPU kernels
    result = {}
    for entry in gathers:
        gather, pool = entry.removesuffix("+swa-pool"), swa_pool or entry.endswith("+swa-pool")
        group = TorchrunGroup(info, gather)
        for extend, prefix in (((40,), (0,)), ((23, 37), (5, 17))):
            for mode in ("two-call", "fused"):
                cp = info.world_size
                dist_out = outputs(model, extend, prefix, cp, info.rank, mode, backend, info.device, group, pool)
                sim_out = outputs(model, extend, prefix, cp, info.rank, mode, backend, info.device, swa_pool=pool)
                same = all(torch.equal(dist_out[w], sim_out[w]) for w in sim_out)
                result[f"{entry} {extend} {prefix} {mode} r{info.rank}"] = same
    every = groups.all_gather_object_gloo(result)
    if info.rank == 0:
        merged = {k: v for part in every for k, v in part.items()}
        print(json.dumps({"equal": merged, "world_size": info.world_size}))
    groups.destroy()


if __name__ == "__main__":
    main()
