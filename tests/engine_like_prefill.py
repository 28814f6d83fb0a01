"""A zigzag CP prefill written the way an engine writes it, profiled the way an engine profiles it.

It does not import cpbench: it is the stand-in for a server whose traces ``cpbench profile --from`` reads.
Each CP rank is a process (gloo group, so torch.profiler records ``distributedInfo``) that runs
``--forwards`` prefill forwards of a GPT-OSS-like stack under ``torch.profiler`` and writes
``<out>/<id>-TP-<rank>.trace.json.gz``, as SGLang's ``/start_profile`` names its files.

One layer: a QKV projection GEMM, attention over a paged K/V cache, an output projection GEMM and a
residual add. Attention is FlashInfer fa3 (``BatchAttentionWithAttentionSinkWrapper``, sinks, window 128
on even layers) where flashinfer and a Hopper GPU are present, otherwise a per-segment torch SDPA.

* ``two-call``: per layer one call over the prev blocks and one over the next blocks (bs segments each);
* ``fused``: one call over the 2*bs segments, the page table duplicated by rows, as SGLang PR #33137.

Zigzag rank r of C, extend length L, block b = L / (2C): prev queries sit at [r*b, (r+1)*b) over
kv_len_prev = (r+1)*b, next queries at [(2C-1-r)*b, (2C-r)*b) over kv_len_next = (2C-r)*b.

``--annotate steps`` marks each forward with ``prof.step()`` (``ProfilerStep#N``); ``none`` leaves the
trace without forward annotations, so a reader must find forwards from the kernels alone. Under nsys, run
``--profiler none --annotate nvtx``: no torch.profiler, each forward an NVTX range ``prefill_forward``.

    python tests/engine_like_prefill.py --mode fused --cp 4 --bs 1 --extend-len 8192 --out /tmp/traces
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist

HQ, HKV, D, HIDDEN, PAGE, WINDOW_LEFT = 64, 8, 64, 2880, 64, 127
NVTX_FORWARD = "prefill_forward"


def segments(rank: int, cp: int, bs: int, extend_len: int):
    """Per call: a list of ``(q_len, kv_len, request)``."""
    b = extend_len // (2 * cp)
    prev = [(b, (rank + 1) * b, s) for s in range(bs)]
    nxt = [(b, (2 * cp - rank) * b, s) for s in range(bs)]
    return prev, nxt


class FlashInferAttention:
    """fa3 with sinks, planned once per forward per (call, layer kind), as a backend's metadata step."""

    def __init__(self, calls, table, dev):
        import flashinfer

        ws = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)
        self.plans = {}
        for w in (WINDOW_LEFT, -1):
            for ci, segs in enumerate(calls):
                qo = torch.tensor([0] + [q for q, _, _ in segs], device=dev).cumsum(0).int()
                pages = [-(-kv // PAGE) for _, kv, _ in segs]
                kv_indptr = torch.tensor([0] + pages, device=dev).cumsum(0).int()
                kv_indices = torch.cat([table[s, :n] for (_, _, s), n in zip(segs, pages)]).int()
                last = torch.tensor([kv - (n - 1) * PAGE for (_, kv, _), n in zip(segs, pages)], device=dev).int()
                wrapper = flashinfer.BatchAttentionWithAttentionSinkWrapper(
                    ws, kv_layout="NHD", backend="fa3", q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
                    head_dim_qk=D, head_dim_vo=D, window_left=w)
                wrapper.plan(qo, kv_indptr, kv_indices, last, HQ, HKV, D, PAGE, causal=True, window_left=w,
                             sm_scale=D ** -0.5, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
                self.plans[(w, ci)] = wrapper

    def __call__(self, ci, w, q, kv, sinks):
        return self.plans[(w, ci)].run(q, kv, sinks)


class SdpaAttention:
    """Per-segment torch SDPA over the pages a segment reads (the slow path of an engine without kernels)."""

    def __init__(self, calls, table, dev):
        self.calls, self.table = calls, table

    def __call__(self, ci, w, q, kv, sinks):
        k_cache, v_cache = kv
        outs, q0 = [], 0
        for q_len, kv_len, s in self.calls[ci]:
            pages = self.table[s, :-(-kv_len // PAGE)]
            k = k_cache[pages].flatten(0, 1)[:kv_len].transpose(0, 1)  # [Hkv, kv_len, D]
            v = v_cache[pages].flatten(0, 1)[:kv_len].transpose(0, 1)
            pos = torch.arange(kv_len - q_len, kv_len, device=q.device)[:, None]
            key = torch.arange(kv_len, device=q.device)[None, :]
            mask = (key <= pos) & ((key >= pos - w) if w >= 0 else True)
            o = torch.nn.functional.scaled_dot_product_attention(
                q[q0:q0 + q_len].transpose(0, 1), k, v, attn_mask=mask, enable_gqa=True)
            outs.append(o.transpose(0, 1))
            q0 += q_len
        return torch.cat(outs)


def run_rank(rank: int, a: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    dist.init_process_group("gloo", rank=rank, world_size=a.cp)
    dev = torch.device("cuda" if torch.cuda.is_available() and not a.cpu else "cpu")
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    g = torch.Generator(device="cpu").manual_seed(rank)
    prev, nxt = segments(rank, a.cp, a.bs, a.extend_len)
    calls = [prev, nxt] if a.mode == "two-call" else [prev + nxt]  # fused: 2*bs segments, rows duplicated
    pages = -(-a.extend_len // PAGE)
    table = torch.randperm(a.bs * pages, generator=g).view(a.bs, pages).to(dev)
    kv = tuple(torch.randn(a.bs * pages, PAGE, HKV, D, generator=g).to(dev, dt) for _ in range(2))
    sinks = torch.randn(HQ, generator=g).to(dev)
    w_qkv = (torch.randn(HIDDEN, (HQ + 2 * HKV) * D, generator=g) * 0.02).to(dev, dt)
    w_o = (torch.randn(HQ * D, HIDDEN, generator=g) * 0.02).to(dev, dt)
    use_fi = dev.type == "cuda" and torch.cuda.get_device_capability(dev) == (9, 0) and _has_flashinfer()
    attend = (FlashInferAttention if use_fi else SdpaAttention)(calls, table, dev)
    tokens = [sum(q for q, _, _ in c) for c in calls]
    hidden = torch.randn(sum(tokens), HIDDEN, generator=g).to(dev, dt)

    def forward(x):
        for layer in range(a.layers):
            w = WINDOW_LEFT if layer % 2 == 0 else -1
            qkv = x @ w_qkv
            q = qkv[:, :HQ * D].contiguous().view(-1, HQ, D)
            outs, t0 = [], 0
            for ci, n in enumerate(tokens):
                outs.append(attend(ci, w, q[t0:t0 + n], kv, sinks))
                t0 += n
            x = x + torch.cat(outs).view(-1, HQ * D) @ w_o
        return x

    forward(hidden)  # warm-up, outside the profile
    dist.barrier()
    if a.profiler == "none":  # under nsys: its own CUDA tracing, each forward an NVTX range with --annotate nvtx
        nvtx = a.annotate == "nvtx" and dev.type == "cuda"
        for _ in range(a.forwards):
            if nvtx:
                torch.cuda.nvtx.range_push(NVTX_FORWARD)
            forward(hidden)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            if nvtx:
                torch.cuda.nvtx.range_pop()
    else:
        profile(a, rank, dev, lambda: forward(hidden))
    dist.barrier()
    dist.destroy_process_group()


def profile(a: argparse.Namespace, rank: int, dev: torch.device, step) -> None:
    """``--forwards`` calls of ``step`` under torch.profiler, written to ``<out>/<id>-TP-<rank>.trace.json.gz``."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{a.profile_id}-TP-{rank}.trace.json.gz")
    steps = a.annotate == "steps"
    sched = torch.profiler.schedule(wait=0, warmup=1, active=a.forwards, repeat=1) if steps else None
    with torch.profiler.profile(activities=acts, record_shapes=True, schedule=sched,
                                on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(a.forwards + steps):  # with steps: one profiler warm-up forward, then the active ones
            step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            if steps:
                prof.step()  # without a schedule, on_trace_ready writes the trace when the profiler stops


def _has_flashinfer() -> bool:
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("two-call", "fused"), default="fused")
    ap.add_argument("--cp", type=int, default=2)
    ap.add_argument("--bs", type=int, default=1)
    ap.add_argument("--extend-len", type=int, default=256)
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--forwards", type=int, default=3)
    ap.add_argument("--annotate", choices=("steps", "nvtx", "none"), default="steps",
                    help="steps: prof.step() per forward; nvtx: an NVTX range per forward (with --profiler none)")
    ap.add_argument("--profiler", choices=("torch", "none"), default="torch",
                    help="none: no torch.profiler (run it under nsys)")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU even where CUDA is present")
    ap.add_argument("--port", type=int, default=29731)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    a.profile_id = str(int(time.time()))
    torch.multiprocessing.spawn(run_rank, args=(a,), nprocs=a.cp, join=True)


if __name__ == "__main__":
    main()
