#!/usr/bin/env python3
"""breakable_check.py: an independent check (no cpbench import) of two-call vs fused zigzag CP prefill,
timed over whole gpt-oss-120b forwards the way SGLang's "breakable CUDA graph" prefill runs them.

What it times. For each cell (cp C, bs requests of extend length L, no prefix) and each simulated rank r
(ranks run one after another on one GPU): one whole forward of --layers layers on T padded rows, where
  * each request's L tokens are cut into 2C zigzag blocks; rank r owns block r ("prev", kv = blocks 0..r)
    and block 2C-1-r ("next", kv = blocks 0..2C-1-r); T = ceil(max_r tokens_r / 2C) * 2C on every rank;
  * per layer: (1) a CUDA-graph segment replays RMSNorm + QKV projection (bias) + neox RoPE, (2) attention
    launches eagerly: "two-call" = one call over the bs prev segments and one over the bs next segments
    (page table [bs, W]); "fused" = one call over 2*bs segments (prev ++ next, page table cat(t, t)),
    (3) a CUDA-graph segment replays O projection + residual, RMSNorm, router + top-4 softmax, the local
    experts (expert parallelism ep = C: E/C experts, T*4 routed rows spread evenly, gate_up grouped GEMM,
    clamped SwiGLU, down grouped GEMM, weighted index_add_ into x). All graph segments share one memory pool.
  * attention reads its own fixed random q and paged K/V (page size 64, random pages, distinct per layer up
    to 4 GiB); even layers sliding window (window 128 = window_left 127), odd layers full; fp32 sinks.
Plans, page tables, metadata, weights and graph capture are outside the timed region. Timing: CUDA
events around one forward after a device sync; host issue time by perf_counter; 3 warm-up forwards, then
ABBA-interleaved two-call / fused samples; medians per (rank, mode). Critical paths: max over ranks of the
whole-forward median ("crit_max"), and layer-synchronised: a second pass of 3 forwards per mode with an
event after every layer gives each rank's window/full fraction; crit_sync = sum over layer kinds of
max over ranks (fraction * median). The fused outputs are checked against two-call and against a torch
reference (layers 0 and 1, fp32 matmul softmax) and the max abs differences are reported.
With --kinds, each timed forward is followed by a chunk of single layers of the same mode (about 50 ms: window
and full alternating, each kind rotating over its last two layers, behind a GPU spin, CUDA events between them),
and the forward is estimated as sum over kinds of (layers of the kind) x (median one-layer time): kinds_* keys,
the same critical path from those estimates, measured at the same clock and temperature as the whole forwards.

Run on a GPU box (H200, flashinfer-python 0.7.2.post1 + flashinfer-cubin, and FlashAttention-3 built from
Dao-AILab's hopper/ for --backend fa3; the first trtllm-fmha-v2 run JIT-compiles its kernels for minutes):
  python3 benchmarks/breakable_check.py --backend trtllm-fmha-v2 --out /tmp/breakable-fmha-v2.jsonl
  python3 benchmarks/breakable_check.py --backend fa3 --out /tmp/breakable-fa3.jsonl   # FlashAttention-3
  python3 benchmarks/breakable_check.py --backend flashinfer-fa3 --out /tmp/breakable-flashinfer-fa3.jsonl
CPU smoke test (no graphs, perf_counter timing, torch attention):
  python3 benchmarks/breakable_check.py --backend torch --device cpu --layers 2 --cells 2x1x64 --hidden 64 \
      --experts 8 --heads 4 --kv-heads 2 --head-dim 16 --window 16 --samples 4 --out /tmp/bc.jsonl
Prints one JSON line per cell and writes them all to --out (JSONL).
"""
import argparse
import json
import statistics
import sys
import time
from itertools import accumulate

import torch
import torch.nn.functional as F

MODES = ("two-call", "fused")
PAGE = 64
KV_BUDGET = 4 << 30          # distinct K/V caches per layer up to this many bytes, then reused cyclically
SHARED_WEIGHTS_ABOVE = 256 << 20  # one layer's weights above this: one weight set serves every layer
SPIN_CYCLES = 4_000_000  # torch.cuda._sleep before a chunk of one-layer samples: about 2 ms at H200 clocks


def zigzag(C, bs, L, r):
    """Rank r's segments: list of (part, request, q_row0, q_len, kv_len); prev rows first, then next."""
    S = 2 * C
    base, rem = divmod(L, S)
    blk = [base + (b < rem) for b in range(S)]
    inc = list(accumulate(blk))
    segs, row = [], 0
    for part, b in (("prev", r), ("next", S - 1 - r)):
        for s in range(bs):
            segs.append((part, s, row, blk[b], inc[b]))
            row += blk[b]
    return segs


def calls_for(segs, mode, table):
    """Attention calls of one layer: list of (q_row0, q_row1, [(q_len, kv_len, table_row)], table)."""
    bs = table.shape[0]
    if mode == "fused":  # one call over prev ++ next, rows of the duplicated table
        groups = [(segs, torch.cat([table, table], 0))]
    else:
        groups = [([s for s in segs if s[0] == p], table) for p in ("prev", "next")]
    out = []
    for g, t in groups:
        rows = [(q, kv, i if t.shape[0] == 2 * bs else s) for i, (_, s, _, q, kv) in enumerate(g)]
        out.append((g[0][2], g[-1][2] + g[-1][3], rows, t))
    return out


def torch_attention(q, k, v, rows, table, window_left, sinks, out):
    """Reference attention of one call: per segment, fp32 matmul softmax, bottom-right causal (+ window)
    mask, GQA, sinks adding exp(sink) to the denominator. q/out: the call's rows [n, Hq, D]."""
    hq, d = q.shape[1], q.shape[2]
    hkv = k.shape[2]
    kf, vf = k.reshape(-1, hkv, d), v.reshape(-1, hkv, d)
    q0 = 0
    for qlen, kvlen, trow in rows:
        if qlen == 0:
            continue
        t = torch.arange(kvlen, device=q.device)
        slots = table[trow].long()[t // PAGE] * PAGE + t % PAGE
        kk = kf[slots].float().repeat_interleave(hq // hkv, 1)  # [kv, Hq, D]
        vv = vf[slots].float().repeat_interleave(hq // hkv, 1)
        s = torch.einsum("mhd,nhd->hmn", q[q0:q0 + qlen].float(), kk) * d ** -0.5
        pos = torch.arange(kvlen - qlen, kvlen, device=q.device)[:, None]
        ok = t[None, :] <= pos
        if window_left >= 0:
            ok &= t[None, :] >= pos - window_left
        s = s.masked_fill(~ok, float("-inf"))
        s = torch.cat([s, sinks.float().view(hq, 1, 1).expand(hq, qlen, 1)], -1)
        p = torch.softmax(s, -1)[..., :-1]
        out[q0:q0 + qlen] = torch.einsum("hmn,nhd->mhd", p, vv).to(out.dtype)
        q0 += qlen


def build_attention(args, backend, calls, q, out, kvs, layer_kv, sinks, num_pages, ctx, dev):
    """Per layer, the list of zero-argument closures launching that layer's attention calls."""
    D, kinds = args.head_dim, [args.window - 1 if i % 2 == 0 else -1 for i in range(args.layers)]
    i32 = lambda xs: torch.tensor(list(xs), dtype=torch.int32, device=dev)  # noqa: E731
    per_call = []  # per call: window_left -> fn(kv) launching it
    for q0, q1, rows, t in calls:
        qs, os_ = q[q0:q1], out[q0:q1]
        ql, kl = [r[0] for r in rows], [r[1] for r in rows]
        bt = t[torch.tensor([r[2] for r in rows], device=dev)]  # [n, W]: the table rows the segments read
        if backend == "trtllm-fmha-v2":
            from flashinfer.prefill import trtllm_fmha_v2_prefill
            base = dict(input_layout="Q_PAGED_KV_NHD", workspace_buffer=args.ws,
                        block_tables=torch.stack([bt, bt + num_pages], 1),  # [n, 2, W]: K and V block offsets
                        seq_lens=i32(kl), max_q_len=max(ql), max_kv_len=ctx, bmm1_scale=D ** -0.5,
                        bmm2_scale=1.0, batch_size=len(rows), cum_seq_lens_q=i32(accumulate([0] + ql)),
                        cum_seq_lens_kv=i32(accumulate([0] + kl)), out=os_, sinks=sinks)
            per_call.append({w: (lambda kv, w=w, base=base, qs=qs: trtllm_fmha_v2_prefill(
                qkv=(qs, kv), mask_mode="sliding_window" if w >= 0 else "causal", window_left=w, **base))
                for w in set(kinds)})
        elif backend == "fa3":  # FlashAttention-3 (Dao-AILab hopper/): the op flash_attn_with_kvcache calls,
            # torch.ops.flash_attn_3.fwd, with out= the layer's output buffer (the public function has no out=, and
            # its custom-op wrapper refuses an output that is an input). Upstream has no sinks: the kernel alone.
            import flash_attn_interface  # noqa: F401  (registers torch.ops.flash_attn_3)
            cu_q, seqused_k, table_rows = i32(accumulate([0] + ql)), i32(kl), bt.contiguous()

            def fa3(kv, w, qs, os_, cu_q=cu_q, seqused_k=seqused_k, table_rows=table_rows, mq=max(ql)):
                torch.ops.flash_attn_3.fwd(
                    qs, kv[0], kv[1], None, None, None, os_,    # q, k_cache, v_cache, k_new, v_new, qv, out
                    cu_q, None, None, None, seqused_k, mq, None,  # cu_seqlens_q/k/k_new, seqused_q/k, max_seqlen_q/k
                    table_rows, None, None, None, None, None,   # page_table, kv_batch_idx, leftpad_k, rotary x3
                    None, None, None, D ** -0.5, True,          # q/k/v descale, softmax_scale, causal
                    w, 0 if w >= 0 else -1, 0, 0.0, True,       # window left/right, attention_chunk, softcap, rotary
                    None, 0, None, 0)                           # scheduler_metadata, num_splits, pack_gqa, sm_margin
            per_call.append({w: (lambda kv, w=w, qs=qs, os_=os_, f=fa3: f(kv, w, qs, os_)) for w in set(kinds)})
        elif backend == "flashinfer-fa3":
            import flashinfer
            pages = [-(-n // PAGE) for n in kl]
            arrays = (i32(accumulate([0] + ql)), i32(accumulate([0] + pages)),
                      torch.cat([bt[i, :p] for i, p in enumerate(pages)]).to(torch.int32),
                      i32(n - (p - 1) * PAGE for n, p in zip(kl, pages)))
            fns = {}
            for w in set(kinds):
                wr = flashinfer.BatchAttentionWithAttentionSinkWrapper(
                    args.ws, kv_layout="NHD", backend="fa3", q_data_type=q.dtype, kv_data_type=q.dtype,
                    head_dim_qk=D, head_dim_vo=D, window_left=w)
                wr.plan(*arrays, args.heads, args.kv_heads, D, PAGE, causal=True, window_left=w,
                        sm_scale=D ** -0.5, q_data_type=q.dtype, kv_data_type=q.dtype)
                fns[w] = lambda kv, wr=wr, qs=qs, os_=os_: wr.run(qs, kv, sinks, out=os_)
            per_call.append(fns)
        else:
            rows_t = [(a, b, i) for i, (a, b, _) in enumerate(rows)]
            per_call.append({w: (lambda kv, w=w, qs=qs, os_=os_, rows_t=rows_t, bt=bt: torch_attention(
                qs, kv[0], kv[1], rows_t, bt, w, sinks, os_)) for w in set(kinds)})
    return [[(lambda f=c[kinds[i]], kv=kvs[layer_kv[i]]: f(kv)) for c in per_call] for i in range(args.layers)]


def make_gmm(a, w_t):
    """Grouped GEMM [E*n, K] x w_t [E, K, N] -> [E*n, N]: torch._grouped_mm with offsets if it runs and
    matches torch.bmm on the real shapes (a, w_t), else torch.bmm. Returns (fn, grouped?)."""
    E, n = w_t.shape[0], a.shape[0] // w_t.shape[0]
    bmm = lambda a, w_t: torch.bmm(a.view(E, n, -1), w_t).view(E * n, -1)  # noqa: E731
    offs = torch.arange(1, E + 1, device=a.device, dtype=torch.int32) * n
    gmm = lambda a, w_t: torch._grouped_mm(a, w_t, offs=offs)  # noqa: E731
    try:
        ok = torch.allclose(gmm(a, w_t).float(), bmm(a, w_t).float(), atol=0.1, rtol=0.05)
        if ok and a.is_cuda:  # it must also capture into a CUDA graph
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                gmm(a, w_t)
        return (gmm, True) if ok else (bmm, False)
    except Exception:
        return bmm, False


def run_cell(args, C, bs, L, dev, dt):
    H, E, K, I = args.hidden, args.experts, args.topk, args.intermediate or args.hidden
    Hq, Hkv, D = args.heads, args.kv_heads, args.head_dim
    assert E % C == 0 and L >= 2 * C and D % 2 == 0, "need experts % cp == 0, extend_len >= 2*cp, even head_dim"
    gen = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape, scale=1.0):  # seeded standard normal * scale, in dt
        return (torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32) * scale).to(dt)

    segs = [zigzag(C, bs, L, r) for r in range(C)]
    toks = [sum(s[3] for s in sg) for sg in segs]
    T = -(-max(toks) // (2 * C)) * 2 * C
    # ---- paged KV cache, page table [bs, W], sinks, fixed q, pre-allocated attention output
    W = -(-L // PAGE)
    ctx, num_pages = W * PAGE, bs * W
    table = torch.randperm(num_pages, generator=torch.Generator().manual_seed(1)).view(bs, W).to(torch.int32).to(dev)
    kv_bytes = 2 * num_pages * PAGE * Hkv * D * torch.finfo(dt).bits // 8
    n_kv = max(1, min(args.layers, KV_BUDGET // kv_bytes))
    kvs = [tuple(rnd(2, num_pages, PAGE, Hkv, D).unbind(0)) for _ in range(n_kv)]  # K, V: one allocation
    layer_kv = [i % n_kv for i in range(args.layers)]
    sinks = torch.randn(Hq, generator=gen, device=dev, dtype=torch.float32)
    q_att = rnd(T, Hq, D)
    attn_out = torch.zeros(T, Hq, D, device=dev, dtype=dt)
    # ---- rest-of-layer weights and static buffers
    El = E // C
    n = -(-T * K // El)
    w_bytes = 2 * ((Hq + 2 * Hkv) * D * H + H * Hq * D + E * H + El * 3 * I * H)
    n_sets = 1 if w_bytes > SHARED_WEIGHTS_ABOVE else args.layers
    sets = [dict(n1=torch.ones(H, device=dev, dtype=dt), n2=torch.ones(H, device=dev, dtype=dt),
                 wqkv=rnd((Hq + 2 * Hkv) * D, H, scale=H ** -0.5), bqkv=rnd((Hq + 2 * Hkv) * D, scale=0.02),
                 wo=rnd(H, Hq * D, scale=(Hq * D) ** -0.5), bo=rnd(H, scale=0.02),
                 wr=rnd(E, H, scale=H ** -0.5), br=rnd(E, scale=0.02),
                 w13_t=rnd(El, 2 * I, H, scale=H ** -0.5).transpose(-2, -1),  # [El, H, 2I] (column-major)
                 w2_t=rnd(El, H, I, scale=I ** -0.5).transpose(-2, -1))        # [El, I, H]
            for _ in range(n_sets)]
    x0 = rnd(T, H)
    x = x0.clone()
    j = torch.arange(El * n, device=dev)
    tok, widx = j % T, (j % T) * K + (j // T) % K  # routed row j: token j mod T, its (j // T) % K-th choice
    pos = torch.zeros(T, device=dev)
    for part, s, row, ql, kvl in segs[0]:
        pos[row:row + ql] = torch.arange(kvl - ql, kvl, device=dev)
    inv = 10000.0 ** (-torch.arange(0, D, 2, device=dev) / D)
    cos, sin = (f(pos[:, None] * inv).to(dt)[:, None, :] for f in (torch.cos, torch.sin))
    gmm, grouped = make_gmm(rnd(El * n, H), sets[0]["w13_t"])

    def rms(t, w):
        tf = t.float()
        return (tf * torch.rsqrt(tf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dt) * w

    def rope(t):
        a, b = t[..., :D // 2], t[..., D // 2:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), -1)

    def pre(i):
        p = sets[i % n_sets]
        qkv = F.linear(rms(x, p["n1"]), p["wqkv"], p["bqkv"])
        return rope(qkv[:, :Hq * D].view(T, Hq, D)), rope(qkv[:, Hq * D:(Hq + Hkv) * D].view(T, Hkv, D))

    def post(i):
        p = sets[i % n_sets]
        x.add_(F.linear(attn_out.view(T, Hq * D), p["wo"], p["bo"]))
        h = rms(x, p["n2"])
        topv, _ = F.linear(h, p["wr"], p["br"]).topk(K, -1)
        topw = torch.softmax(topv.float(), -1).to(dt)
        g, u = gmm(h.index_select(0, tok), p["w13_t"]).chunk(2, -1)
        g, u = g.clamp(max=7.0), u.clamp(-7.0, 7.0)
        y = gmm(g * torch.sigmoid(1.702 * g) * (u + 1), p["w2_t"])
        x.index_add_(0, tok, y * topw.view(-1).index_select(0, widx)[:, None])

    cuda = dev.type == "cuda"
    if cuda:  # warm up eagerly on a side stream, then capture 2 graph segments per layer into one pool
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(args.layers):
                pre(i), post(i)
        torch.cuda.current_stream().wait_stream(side)
        pool, graphs = torch.cuda.graph_pool_handle(), []
        for i in range(args.layers):
            for f in (pre, post):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    f(i)
                graphs.append(g)
        pre_fns, post_fns = [g.replay for g in graphs[0::2]], [g.replay for g in graphs[1::2]]
    else:  # no CUDA graphs on CPU: the segments run eagerly
        pre_fns = [lambda i=i: pre(i) for i in range(args.layers)]
        post_fns = [lambda i=i: post(i) for i in range(args.layers)]
    # the segments are identical on every rank (same T), so one captured set serves all ranks and modes
    attn = {(r, m): build_attention(args, args.backend, calls_for(segs[r], m, table), q_att, attn_out, kvs,
                                    layer_kv, sinks, num_pages, ctx, dev) for r in range(C) for m in MODES}
    kinds = ["window" if i % 2 == 0 else "full" for i in range(args.layers)]

    def forward(r, m, mark=None):
        for i in range(args.layers):
            pre_fns[i]()
            for f in attn[(r, m)][i]:
                f()
            post_fns[i]()
            if mark:
                mark(i + 1)

    def timed(r, m, per_layer=False):
        """(device ms, host-issue ms, per-layer ms or None) of one forward."""
        x.copy_(x0)
        if cuda:
            torch.cuda.synchronize()
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(args.layers + 1)]
            ev[0].record()
            t0 = time.perf_counter()
            forward(r, m, (lambda k: ev[k].record()) if per_layer else None)
            if not per_layer:
                ev[-1].record()
            host = (time.perf_counter() - t0) * 1e3
            ev[-1].synchronize()
            lay = [ev[k].elapsed_time(ev[k + 1]) for k in range(args.layers)] if per_layer else None
            return ev[0].elapsed_time(ev[-1]), host, lay
        st = [time.perf_counter()]
        forward(r, m, (lambda k: st.append(time.perf_counter())) if per_layer else None)
        st.append(time.perf_counter())
        ms = (st[-1] - st[0]) * 1e3
        return ms, ms, [(st[k + 1] - st[k]) * 1e3 for k in range(args.layers)] if per_layer else None

    rotation = {k: [i for i in range(args.layers) if kinds[i] == k][-2:] for k in ("window", "full")}

    def one_layer_chunk(r, m, layer_ms):
        """--kinds: layers of mode m back to back for about --chunk-ms, window and full alternating, each kind
        rotating over its last 2 layers, behind a GPU spin that hides the host's issue of the first ones (CUDA
        events between layers; perf_counter on a CPU). Returns [(kind, ms)] per layer."""
        count = max(4, 2 * round(args.chunk_ms / max(layer_ms, 1e-3) / 2))
        order = []
        for j in range(count):  # window, full, window, full, ...: the j//2-th layer of the kind's rotation
            rot = rotation["window" if j % 2 == 0 else "full"]
            order.append(rot[(j // 2) % len(rot)])

        def layer(i):
            pre_fns[i]()
            for f in attn[(r, m)][i]:
                f()
            post_fns[i]()
        if not cuda:
            out = []
            for i in order:
                t0 = time.perf_counter()
                layer(i)
                out.append((kinds[i], (time.perf_counter() - t0) * 1e3))
            return out
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(count + 1)]
        torch.cuda.synchronize()
        torch.cuda._sleep(SPIN_CYCLES)
        ev[0].record()
        for i, e in zip(order, ev[1:]):
            layer(i)
            e.record()
        ev[-1].synchronize()
        return [(kinds[i], a.elapsed_time(b)) for i, a, b in zip(order, ev, ev[1:])]

    ranks, samples = [], args.samples + args.samples % 2
    for r in range(C):
        check = {}
        for m in MODES:  # correctness: attention of layers 0 (window) and 1 (full), fused vs two-call vs torch
            for i in range(min(2, args.layers)):
                for f in attn[(r, m)][i]:
                    f()
                check[(m, i)] = attn_out[:toks[r]].float().clone()
            for _ in range(args.warmup):
                timed(r, m)
        ref = torch.empty_like(attn_out)
        ref_diff = 0.0
        # upstream FlashAttention-3 computes no sinks: its reference has none (a -inf sink adds exp(-inf) = 0)
        ref_sinks = torch.full_like(sinks, float("-inf")) if args.backend == "fa3" else sinks
        for i in range(min(2, args.layers)):
            w = args.window - 1 if i % 2 == 0 else -1
            for q0, q1, rows, t in calls_for(segs[r], "two-call", table):
                torch_attention(q_att[q0:q1], *kvs[layer_kv[i]], rows, t, w, ref_sinks, ref[q0:q1])
            ref_diff = max(ref_diff, (check[("fused", i)] - ref[:toks[r]].float()).abs().max().item())
        mode_diff = max((check[("fused", i)] - check[("two-call", i)]).abs().max().item()
                        for i in range(min(2, args.layers)))
        res = {m: [] for m in MODES}
        by_kind = {(m, k): [] for m in MODES for k in ("window", "full")}  # --kinds: one-layer times, ms
        for s in range(samples):  # ABBA: AB, BA, AB, ...
            for m in (MODES if s % 2 == 0 else MODES[::-1]):
                res[m].append(timed(r, m)[:2])
                if args.kinds:  # right after the whole forward: the same clock and temperature
                    for k, t in one_layer_chunk(r, m, res[m][-1][0] / args.layers):
                        by_kind[(m, k)].append(t)
        frac = {}
        for m in MODES:  # layer-synchronised pass: an event after every layer
            lay = [sum(v) for v in zip(*(timed(r, m, per_layer=True)[2] for _ in range(args.sync_forwards)))]
            frac[m] = {k: sum(t for t, kk in zip(lay, kinds) if kk == k) / sum(lay) for k in ("window", "full")}
        med = {m: statistics.median(d for d, _ in res[m]) for m in MODES}
        n_kind = {k: kinds.count(k) for k in ("window", "full")}
        est = {m: {k: n_kind[k] * statistics.median(by_kind[(m, k)]) for k in n_kind} for m in MODES} \
            if args.kinds else None  # per mode and kind: n_kind x the median one-layer time, ms
        ranks.append(dict(rank=r, tokens=toks[r], two_call_ms=med["two-call"], fused_ms=med["fused"], kinds_ms=est,
                          ratio=med["two-call"] / med["fused"],
                          host_two_call_ms=statistics.median(h for _, h in res["two-call"]),
                          host_fused_ms=statistics.median(h for _, h in res["fused"]),
                          frac_window={m: frac[m]["window"] for m in MODES},
                          fused_vs_two_call_maxdiff=mode_diff, fused_vs_torch_ref_maxdiff=ref_diff))
        print(f"# cp{C} bs{bs} L{L} rank {r}: two-call {med['two-call']:.3f} ms, fused {med['fused']:.3f} ms",
              file=sys.stderr, flush=True)
    crit = {m: max(rk[f"{m.replace('-', '_')}_ms"] for rk in ranks) for m in MODES}
    sync = {m: sum(max((rk["frac_window"][m] if k == "window" else 1 - rk["frac_window"][m]) *
                       rk[f"{m.replace('-', '_')}_ms"] for rk in ranks) for k in ("window", "full"))
            for m in MODES}
    if args.kinds:  # the same critical path from the one-layer times: sum over kinds of max over ranks
        kinds_crit = {m: sum(max(rk["kinds_ms"][m][k] for rk in ranks) for k in ("window", "full")) for m in MODES}
        kinds_cols = dict(kinds_two_call_ms=kinds_crit["two-call"], kinds_fused_ms=kinds_crit["fused"],
                          kinds_ratio=kinds_crit["two-call"] / kinds_crit["fused"])
    else:
        kinds_cols = {}
    return dict(cell=dict(cp=C, bs=bs, extend_len=L, backend=args.backend), ranks=ranks, **kinds_cols,
                crit_max_ratio=crit["two-call"] / crit["fused"], crit_sync_ratio=sync["two-call"] / sync["fused"],
                two_call_ms=crit["two-call"], fused_ms=crit["fused"], crit_sync_two_call_ms=sync["two-call"],
                crit_sync_fused_ms=sync["fused"], padded_rows=T, layers=args.layers, samples=samples,
                grouped_mm=grouped, shared_weights=n_sets == 1, kv_caches=n_kv,
                device=torch.cuda.get_device_name(dev) if cuda else "cpu", torch=torch.__version__)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("trtllm-fmha-v2", "fa3", "flashinfer-fa3", "torch"),
                    default="trtllm-fmha-v2", help="fa3: FlashAttention-3 (flash_attn_interface, no sinks); "
                    "flashinfer-fa3: FlashInfer's fa3 template")
    ap.add_argument("--cells", default="4x1x2048,4x4x8192,4x16x2048", help="cp x bs x extend_len, comma separated")
    ap.add_argument("--samples", type=int, default=10, help="timed forwards per (rank, mode); rounded up to even")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--sync-forwards", type=int, default=3, help="forwards per mode of the per-layer event pass")
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--kinds", action="store_true", help="after each timed forward, also time one layer of each "
                    "kind back to back (--chunk-ms of layers) and estimate the forward from them (kinds_* keys)")
    ap.add_argument("--chunk-ms", type=float, default=50.0, help="--kinds: GPU time of one chunk of layers")
    ap.add_argument("--out", default="breakable_check.jsonl")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--hidden", type=int, default=2880)
    ap.add_argument("--intermediate", type=int, default=None, help="expert intermediate size (default: --hidden)")
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--topk", type=int, default=4)
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--window", type=int, default=128, help="sliding window of even layers (window_left = window-1)")
    args = ap.parse_args()
    if args.kinds and args.layers < 2:
        ap.error("--kinds needs a window and a full layer: --layers 2 or more")
    dev, dt = torch.device(args.device), torch.bfloat16
    if dev.type == "cpu":  # the CPU run is a smoke test; tiny ops with many threads were 100x slower here
        torch.set_num_threads(1)
    if args.backend != "torch" and dev.type != "cuda":
        raise SystemExit(f"--backend {args.backend} needs a CUDA GPU with flashinfer; use --backend torch on CPU")
    if args.backend != "torch":  # SGLang's zeroed 512 MiB TRT-LLM workspace; fa3's float workspace (256 MiB)
        args.ws = torch.zeros((512 if args.backend == "trtllm-fmha-v2" else 256) << 20, dtype=torch.uint8, device=dev)
    with open(args.out, "w") as fh:
        for spec in args.cells.split(","):
            C, bs, L = (int(v) for v in spec.strip().split("x"))
            row = run_cell(args, C, bs, L, dev, dt)
            print(json.dumps(row), flush=True)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            if dev.type == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
