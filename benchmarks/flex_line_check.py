"""Independent check of cpbench's flex rows (does not import cpbench): FlexAttention two-call, fused and
CP-native on one zigzag CP rank, timed the way a kernel harness times a launch (CUDA events around N
back-to-back forwards after warm-up, median of repeats).

Per rank r of cp_size C and an extend length L (no prefix; L divisible by 2C): block b = L / (2C), the prev
block holds queries at positions [r*b, (r+1)*b), the next block [(2C-1-r)*b, (2C-r)*b); each request's K/V
sits in a paged pool (page_size tokens per page, pages in a random order) read through its page-table row.

* two-call: two flex calls (B = bs rows of b queries): prev over kv_len (r+1)*b, next over (2C-r)*b;
* fused: one call over 2*bs rows (prev rows, then next rows), each reading its row of the duplicated table;
* cp-native: one call over bs rows of 2b queries at their positions, over kv_len (2C-r)*b.

Each call gathers its rows' keys from the pool (index_select through the page table) and runs compiled
FlexAttention with a causal (and window) mask read from tensors, sinks folded in from the log-sum-exp. A
forward is gpt-oss-120b's 36 layers: 18 window (128) and 18 full layers alternating.

    python benchmarks/flex_line_check.py --bs 1 4 --extend-len 8192 --cp 4 --rank 0
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

HQ, HKV, D, PAGE, LAYERS, WINDOW = 64, 8, 64, 64, 36, 128


def rows_for(mode, bs, b, C, r):
    """Per call: a list of rows, each ``(q positions, kv_len, request)``."""
    prev = [(list(range(r * b, (r + 1) * b)), (r + 1) * b, s) for s in range(bs)]
    nxt = [(list(range((2 * C - 1 - r) * b, (2 * C - r) * b)), (2 * C - r) * b, s) for s in range(bs)]
    if mode == "two-call":
        return [prev, nxt]
    if mode == "fused":
        return [prev + nxt]
    return [[(p[0] + n[0], n[1], p[2]) for p, n in zip(prev, nxt)]]


def build(rows, table, dev):
    B = len(rows)
    qmax, kmax = max(len(x[0]) for x in rows), max(x[1] for x in rows)
    q_pos = torch.full((B, qmax), -1, dtype=torch.int64, device=dev)
    kv_len = torch.tensor([x[1] for x in rows], dtype=torch.int64, device=dev)
    slots = torch.zeros(B, kmax, dtype=torch.int64, device=dev)
    for i, (pos, n, req) in enumerate(rows):
        q_pos[i, :len(pos)] = torch.tensor(pos, device=dev)
        t = torch.arange(n, device=dev)
        slots[i, :n] = table[req][t // PAGE].long() * PAGE + t % PAGE
    return q_pos, kv_len, slots, qmax, kmax


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--extend-len", type=int, default=8192)
    ap.add_argument("--cp", type=int, default=4)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--forwards", type=int, default=5)
    a = ap.parse_args()
    dev, dt = torch.device("cuda"), torch.bfloat16
    # one static kernel per call shape: past dynamo's default recompile limit (8) it would fall back to eager
    # FlexAttention, which materialises every score (128 GiB at bs 16 x 16K)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
    flex = torch.compile(flex_attention, dynamic=False)
    g = torch.Generator(device="cpu").manual_seed(0)
    C, r, L = a.cp, a.rank, a.extend_len
    b = L // (2 * C)
    for bs in a.bs:
        pages = -(-L // PAGE)
        perm = torch.randperm(bs * pages, generator=g).to(dev).int()
        table = perm.view(bs, pages)
        k_pool = torch.randn(bs * pages * PAGE, HKV, D, device=dev, dtype=dt)
        v_pool = torch.randn_like(k_pool)
        sinks = torch.randn(HQ, device=dev)
        out = {}
        for mode in ("two-call", "fused", "cp-native"):
            calls = []
            for rows in rows_for(mode, bs, b, C, r):
                q_pos, kv_len, slots, qmax, kmax = build(rows, table, dev)
                q = torch.randn(len(rows), HQ, qmax, D, device=dev, dtype=dt)
                masks = {}
                for w in (WINDOW - 1, 1 << 30):
                    wt = torch.tensor(w, device=dev)

                    def mm(bb, h, qi, ki, q_pos=q_pos, kv_len=kv_len, wt=wt):
                        p = q_pos[bb, qi]
                        return (ki <= p) & (ki < kv_len[bb]) & (ki >= p - wt)
                    masks[w] = create_block_mask(mm, len(rows), None, qmax, kmax, device=dev)
                calls.append((q, slots, masks))

            def layer(w):
                for q, slots, masks in calls:
                    B, K = slots.shape
                    k = k_pool.index_select(0, slots.view(-1)).view(B, K, HKV, D).transpose(1, 2)
                    v = v_pool.index_select(0, slots.view(-1)).view(B, K, HKV, D).transpose(1, 2)
                    o, aux = flex(q, k, v, block_mask=masks[w], enable_gqa=True, return_aux=AuxRequest(lse=True))
                    o.mul_(torch.sigmoid(aux.lse - sinks.view(1, HQ, 1)).unsqueeze(-1))  # fp32 factor, one rounding

            def forward():
                for i in range(LAYERS):
                    layer(WINDOW - 1 if i % 2 == 0 else 1 << 30)

            for _ in range(3):
                forward()
            torch.cuda.synchronize()
            times = []
            for _ in range(a.reps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(a.forwards):
                    forward()
                e1.record()
                torch.cuda.synchronize()
                times.append(e0.elapsed_time(e1) * 1e3 / a.forwards)  # µs per forward
            out[mode] = statistics.median(times)
        print(json.dumps({"bs": bs, "extend_len": L, "cp": C, "rank": r, "us_per_forward": out,
                          "fused_vs_two_call": out["two-call"] / out["fused"],
                          "native_vs_fused": out["fused"] / out["cp-native"]}))


if __name__ == "__main__":
    main()
