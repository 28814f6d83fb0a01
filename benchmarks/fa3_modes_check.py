#!/usr/bin/env python3
"""fa3_modes_check.py: an independent check (no cpbench import) of FlashAttention-3's three zigzag CP modes,
timed the way FlashAttention's own benchmarks time a kernel (CUDA graph replays between CUDA events).

For each cell (cp C, bs requests of extend length L, no prefix) and each simulated rank r: the attention of one
gpt-oss-120b prefill forward (36 layers, 64 q heads, 8 kv heads, head_dim 64, even layers a 128-token window
= window_size (127, 0), odd layers full), bf16, paged K/V (page size 64, seeded random pages, a distinct cache
per layer up to 4 GiB, then reused cyclically), through the public ``flash_attn_interface.flash_attn_with_kvcache``:
  * two-call:  prev over the bs prev blocks, then next over the bs next blocks; page_table [bs, W];
  * fused:     one call over the 2*bs segments (prev ++ next) with page_table cat(t, t)  [2*bs, W];
  * cp-native: the same 2*bs segments over page_table [bs, W] with cache_batch_idx [0..bs-1, 0..bs-1].
Rank r owns block r (kv = blocks 0..r) and block 2C-1-r (kv = blocks 0..2C-1-r); block b of L tokens has
L // 2C (+1 for b < L % 2C) tokens. Each (rank, mode) forward is captured once as a CUDA graph; samples are
replays between two CUDA events, the three modes interleaved (ABC CBA ...) after 3 warm-up replays. Per cell:
the median per (rank, mode), the critical path = the slowest rank's median, and the ratios two-call / fused and
two-call / cp-native on it. The outputs of the three modes are compared (max |diff|).

    python3 benchmarks/fa3_modes_check.py --cells 4x1x2048,4x16x8192 --samples 30 --out /tmp/fa3-modes.jsonl
Prints one JSON line per cell and writes them to --out.
"""
import argparse
import json
import statistics

import torch
from flash_attn_interface import flash_attn_with_kvcache

LAYERS, HQ, HKV, D, WINDOW_LEFT, PAGE = 36, 64, 8, 64, 127, 64
KV_BUDGET = 4 << 30
MODES = ("two-call", "fused", "cp-native")


def blocks(L, C):
    base, rem = divmod(L, 2 * C)
    return [base + (b < rem) for b in range(2 * C)]


def rank_calls(C, bs, L, r, table, dev):
    """{mode: [(q row range, cu_seqlens_q, cache_seqlens, max_seqlen_q, page_table, cache_batch_idx)]}"""
    blk = blocks(L, C)
    qp, qn = blk[r], blk[2 * C - 1 - r]
    kp, kn = sum(blk[:r + 1]), sum(blk[:2 * C - r])
    i32 = dict(dtype=torch.int32, device=dev)

    def call(q_lens, kv_lens, start, pt, idx):
        cu = torch.tensor([0] + [sum(q_lens[:i + 1]) for i in range(len(q_lens))], **i32)
        return ((start, start + sum(q_lens)), cu, torch.tensor(kv_lens, **i32), max(q_lens), pt,
                None if idx is None else torch.tensor(idx, **i32))

    both_q, both_kv = [qp] * bs + [qn] * bs, [kp] * bs + [kn] * bs
    return {"two-call": [call([qp] * bs, [kp] * bs, 0, table, None), call([qn] * bs, [kn] * bs, qp * bs, table, None)],
            "fused": [call(both_q, both_kv, 0, torch.cat([table, table]), None)],
            "cp-native": [call(both_q, both_kv, 0, table, list(range(bs)) * 2)]}


def forward(q, caches, calls):
    """One forward's attention: every layer's calls; returns the last window and full layers' outputs."""
    outs = {}
    for layer in range(LAYERS):
        k, v = caches[layer % len(caches)]
        window = (WINDOW_LEFT, 0) if layer % 2 == 0 else (-1, -1)
        outs[layer % 2] = [flash_attn_with_kvcache(q[a:b], k, v, cache_seqlens=sk, page_table=pt, cache_batch_idx=idx,
                                                   cu_seqlens_q=cu, max_seqlen_q=mq, causal=True, window_size=window)
                           for (a, b), cu, sk, mq, pt, idx in calls]
    return {w: torch.cat(o) for w, o in outs.items()}


def run_cell(C, bs, L, samples, dev):
    gen = torch.Generator(device="cpu").manual_seed(0)
    pages_per_req = -(-L // PAGE)
    num_pages = bs * pages_per_req
    table = torch.randperm(num_pages, generator=gen).to(torch.int32).view(bs, pages_per_req).to(dev)
    per_layer = 2 * num_pages * PAGE * HKV * D * 2
    caches = [(torch.randn(num_pages, PAGE, HKV, D, device=dev, dtype=torch.bfloat16),
               torch.randn(num_pages, PAGE, HKV, D, device=dev, dtype=torch.bfloat16))
              for _ in range(max(1, min(LAYERS, KV_BUDGET // per_layer)))]
    per_rank = {}
    for r in range(C):
        calls = rank_calls(C, bs, L, r, table, dev)
        rows = calls["two-call"][1][0][1]
        q = torch.randn(rows, HQ, D, device=dev, dtype=torch.bfloat16)
        graphs, results = {}, {}
        for m in MODES:
            forward(q, caches, calls[m])  # warm-up outside capture
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                results[m] = forward(q, caches, calls[m])
            graphs[m] = g
        for _ in range(3):
            for m in MODES:
                graphs[m].replay()
        times = {m: [] for m in MODES}
        for i in range(samples):
            for m in (MODES if i % 2 == 0 else MODES[::-1]):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                a.record()
                graphs[m].replay()
                b.record()
                b.synchronize()
                times[m].append(a.elapsed_time(b) * 1e3)
        diff = max(float((results[m][w].float() - results["two-call"][w].float()).abs().max())
                   for m in ("fused", "cp-native") for w in results[m])
        per_rank[r] = {"median_us": {m: statistics.median(t) for m, t in times.items()}, "max_abs_diff": diff}
        del graphs, results
        torch.cuda.empty_cache()
    crit = {m: max(v["median_us"][m] for v in per_rank.values()) for m in MODES}
    return {"cp": C, "bs": bs, "extend_len": L, "samples": samples, "critical_us": crit,
            "two_call_over_fused": crit["two-call"] / crit["fused"],
            "two_call_over_cp_native": crit["two-call"] / crit["cp-native"],
            "max_abs_diff_vs_two_call": max(v["max_abs_diff"] for v in per_rank.values()), "ranks": per_rank,
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="4x1x2048,4x4x8192,4x16x16384", help="CPxBSxL, comma-separated")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    dev = torch.device("cuda")
    with open(a.out, "w") as f:
        for cell in a.cells.split(","):
            C, bs, L = map(int, cell.split("x"))
            row = run_cell(C, bs, L, a.samples, dev)
            line = json.dumps(row)
            print(json.dumps({k: v for k, v in row.items() if k != "ranks"}), flush=True)
            f.write(line + "\n")
            f.flush()


if __name__ == "__main__":
    main()
