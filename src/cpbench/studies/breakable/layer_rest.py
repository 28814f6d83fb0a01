"""The rest of each layer as torch work, for the ``breakable`` forward (docs/design.md §11).

:class:`LayerRest` holds the weights and the static activations of one cell's rest-of-layer work
(:class:`cpbench.domain.layer_rest.RestShape`) and hands out, per layer, the closure that runs before
attention and the one after it. Both only launch work on static buffers (the hidden state ``x``), so they
can be captured into CUDA graphs that share one memory pool: intermediates live and die inside a segment.

* Weights run in the activation dtype. Copies rotate over the layers so that at least
  :data:`ROTATION_BYTES` of weights pass between two uses of one copy: no weight small enough to stay in
  L2 (50-60 MiB on Hopper) is read again from L2 by the next layer.
* The attention kernels read the cell's own q and paged K/V, not this projection's output: the data
  path is cut there (the shapes are the same), so the attention outputs stay checkable against the
  fp32 reference. The O projection reads a static stand-in of the attention output.
* The experts: each local expert gets ``rows_per_expert`` routed rows (the even spread), run as one
  grouped GEMM (``torch._grouped_mm`` where it runs, else ``torch.bmm``: the same products on equal groups).
* Real ranks with a MoE (``a2a`` given, a torchrun launch): the routed rows cross the ranks as SGLang's EP
  MoE moves them, an ``all_to_all_single`` before the experts (dispatch) and one after (combine). Each rank
  sends its ``tokens * top_k`` routed rows (``hidden_size`` elements each, padded to a multiple of the group
  size), split evenly over the group, and receives as many; the collectives are eager steps between graph
  segments (``comm``), like the K|V gather.
* ``--layer-rest-us N`` (:class:`SpinRest`) replaces all of it with N µs of GPU work per layer, half before
  and half after attention (``torch.cuda._sleep``, calibrated once; a busy wait on CPU).
"""

from __future__ import annotations

import math
import time
from typing import Callable, Protocol

import torch
import torch.nn.functional as F

from cpbench.domain.layer_rest import RestShape

Call = Callable[[], None]


class AllToAll(Protocol):
    """``all_to_all_single(out, inp)`` over a group of ``ranks`` processes (ranks/torchrun_group.py), equal
    splits; ``what`` names the step in the error of a broken collective."""

    ranks: int

    def __call__(self, out: torch.Tensor, inp: torch.Tensor, what: str) -> None: ...


ROTATION_BYTES = 256 << 20  # weights that pass between two uses of one weight copy (> 4x an H200's L2)
SWIGLU_LIMIT = 7.0  # gpt-oss clamps the gate and up projections at 7 (config swiglu_limit)


class LayerRest:
    """Weights and static buffers of one cell's rest-of-layer work on ``shape.tokens`` rows.

    Args:
        shape: the per-rank sizes. num_layers: layers of a forward. device, dtype: where and in what the
            weights and activations live. seed: weight and activation values (timing does not depend on them).
        a2a: a torchrun launch's all-to-all over the CP group (the MoE dispatch and combine, :meth:`after_steps`);
            None for simulated ranks.
    Attributes:
        copies: weight sets the layers rotate over. weight_bytes: their bytes. grouped: ``"grouped_mm"`` or
            ``"bmm"`` (how the experts run; ``""`` for a dense MLP).
    Raises:
        torch.OutOfMemoryError: the weights or buffers do not fit (the caller records the cell as skipped).
    """

    def __init__(self, shape: RestShape, num_layers: int, device: torch.device, dtype: torch.dtype,
                 seed: int = 0, a2a: AllToAll | None = None) -> None:
        self.shape = shape
        self.a2a = a2a if shape.is_moe else None
        elem = torch.tensor([], dtype=dtype).element_size()
        per_layer = shape.weight_bytes(elem)
        self.copies = min(num_layers, max(1, math.ceil(ROTATION_BYTES / max(per_layer, 1))))
        self.weight_bytes = per_layer * self.copies
        gen = torch.Generator(device=device).manual_seed(seed + 7)
        t, h, d = shape.tokens, shape.hidden_size, shape.head_dim

        def w(*size: int, scale: float = 0.02) -> torch.Tensor:
            return torch.randn(*size, generator=gen, device=device, dtype=dtype) * scale

        self.sets = [self._weights(w) for _ in range(self.copies)]
        self.x = w(t, h, scale=0.1)  # the hidden state: [T, H]
        self.x0 = self.x.clone()
        self.attn = w(t, shape.o_in, scale=0.1)  # stand-in of the attention output: [T, Hq*D]
        self.qkv = torch.empty(t, shape.qkv_out, device=device, dtype=dtype)  # RoPE'd q|k, then v: [T, (Hq+2Hkv)*D]
        inv = 1.0 / (10000 ** (torch.arange(0, d // 2, dtype=torch.float32) * 2 / d))
        ang = torch.arange(t, dtype=torch.float32)[:, None] * inv[None, :]  # [T, D/2]
        self.cos = ang.cos().to(device=device, dtype=dtype)[:, None, :]  # [T, 1, D/2]
        self.sin = ang.sin().to(device=device, dtype=dtype)[:, None, :]
        self.grouped = ""
        if shape.is_moe:
            n, e = shape.rows_per_expert, shape.local_experts
            # dispatch: local row j of expert rows reads token j mod T; combine weight j mod (T * top_k)
            j = torch.arange(n * e)
            self.route_idx = (j % t).to(device)
            self.weight_idx = (j % (t * shape.top_k)).to(device)
            self.offs = torch.arange(1, e + 1, dtype=torch.int32, device=device) * n
            self.grouped = "grouped_mm" if self._grouped_mm_runs(device, dtype) else "bmm"
        self.a2a_rows = 0
        if self.a2a is not None:
            k, ranks = shape.top_k, self.a2a.ranks
            self.a2a_rows = -(-t * k // ranks) * ranks  # S: routed rows sent (and received) per rank
            rows = torch.arange(self.a2a_rows)
            self.send_idx = (rows % t).to(device)  # dispatched row j carries token j mod T
            self.send_w_idx = (rows % (t * k)).to(device)  # ... with combine weight j mod (T * top_k)
            self.recv_idx = (torch.arange(shape.rows_per_expert * shape.local_experts) % self.a2a_rows).to(device)
            self.back_idx = (rows % (shape.rows_per_expert * shape.local_experts)).to(device)
            self.top_w = torch.zeros(t, k, device=device, dtype=dtype)  # [T, top_k]
            self.send, self.recv, self.csend, self.crecv = (torch.zeros(self.a2a_rows, h, device=device, dtype=dtype)
                                                            for _ in range(4))  # [S, H] each

    def _weights(self, w) -> dict:
        s = self.shape
        h = s.hidden_size
        out = {"norm_in": w(h, scale=0.0) + 1, "norm_post": w(h, scale=0.0) + 1, "qkv": w(s.qkv_out, h),
               "o": w(h, s.o_in)}
        if s.attention_bias:
            out["qkv_b"], out["o_b"] = w(s.qkv_out), w(h)
        if s.is_moe:
            e, i = s.local_experts, s.expert_intermediate
            out["router"] = w(s.num_experts, h)
            out["router_b"] = w(s.num_experts) if s.attention_bias else None
            out["gate_up"] = w(e, h, 2 * i)  # [E_local, H, 2I]
            out["down"] = w(e, i, h)  # [E_local, I, H]
        else:
            out["gate_up"] = w(2 * s.mlp_intermediate, h)
            out["down"] = w(h, s.mlp_intermediate)
        return out

    def _grouped_mm_runs(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether ``torch._grouped_mm`` runs here on this shape (CUDA, bf16, sm90+): tried once, outside timing."""
        if device.type != "cuda" or not hasattr(torch, "_grouped_mm") or dtype != torch.bfloat16:
            return False
        try:
            ws = self.sets[0]
            xe = self.x.index_select(0, self.route_idx)
            torch._grouped_mm(xe, ws["gate_up"], offs=self.offs)
            torch.cuda.synchronize(device)
            return True
        except Exception:  # noqa: BLE001 - an unsupported GPU or shape: bmm does the same products
            return False

    def reset(self) -> None:
        """Put the hidden state back to its first value (between checks; not needed for timing)."""
        self.x.copy_(self.x0)

    def before_attention(self, layer: int) -> Call:
        """Layer ``layer``'s work before attention: input RMSNorm, QKV projection (+ bias), RoPE."""
        ws = self.sets[layer % self.copies]
        s = self.shape

        rot = s.qkv_out - s.kv_width  # q and k columns, rotated per head of width D
        d = s.head_dim

        def run() -> None:
            h = F.rms_norm(self.x, (s.hidden_size,), ws["norm_in"], 1e-5)  # [T, H]
            qkv = F.linear(h, ws["qkv"], ws.get("qkv_b"))  # [T, (Hq+2Hkv)*D]
            qk = qkv[:, :rot].unflatten(1, (-1, d))  # [T, Hq+Hkv, D]
            x1, x2 = qk[..., : d // 2], qk[..., d // 2:]
            out = self.qkv[:, :rot].unflatten(1, (-1, d))
            torch.sub(x1 * self.cos, x2 * self.sin, out=out[..., : d // 2])
            torch.add(x2 * self.cos, x1 * self.sin, out=out[..., d // 2:])
            self.qkv[:, rot:].copy_(qkv[:, rot:])
        return run

    @property
    def a2a_bytes(self) -> int:
        """Bytes one rank sends per layer in the MoE dispatch and combine (0 without real ranks)."""
        return 2 * self.a2a_rows * self.shape.hidden_size * self.x.element_size() if self.a2a is not None else 0

    def after_steps(self, layer: int) -> list[tuple[str, Call, str]]:
        """Layer ``layer``'s work after attention as ``(name, closure, kind)`` steps: one ``layer`` step
        (:meth:`after_attention`), or with real ranks the MoE split at its collectives: ``after_attention``
        (O projection, norm, router, the rows to send), ``moe_dispatch`` (comm), ``experts`` (layer),
        ``moe_combine`` (comm), ``moe_reduce`` (layer: the weighted sum into the hidden state)."""
        if self.a2a is None:
            return [("after_attention", self.after_attention(layer), "layer")]
        ws = self.sets[layer % self.copies]
        s = self.shape

        def route() -> None:
            self.x.add_(F.linear(self.attn, ws["o"], ws.get("o_b")))
            h = F.rms_norm(self.x, (s.hidden_size,), ws["norm_post"], 1e-5)
            top_w, _ = torch.topk(F.linear(h, ws["router"], ws.get("router_b")), s.top_k, dim=-1)
            self.top_w.copy_(torch.softmax(top_w.float(), dim=-1))
            torch.index_select(h, 0, self.send_idx, out=self.send)

        def experts() -> None:
            y = self._experts(self.recv.index_select(0, self.recv_idx), ws)
            torch.index_select(y, 0, self.back_idx, out=self.csend)

        def reduce() -> None:
            w = self.top_w.reshape(-1).index_select(0, self.send_w_idx)[:, None]
            self.x.index_add_(0, self.send_idx, self.crecv * w)

        return [("after_attention", route, "layer"),
                ("moe_dispatch", lambda: self.a2a(self.recv, self.send, f"the MoE dispatch of layer {layer}"), "comm"),
                ("experts", experts, "layer"),
                ("moe_combine", lambda: self.a2a(self.crecv, self.csend, f"the MoE combine of layer {layer}"), "comm"),
                ("moe_reduce", reduce, "layer")]

    def after_attention(self, layer: int) -> Call:
        """Layer ``layer``'s work after attention: O projection (+ bias), residual, post-attention RMSNorm,
        then the dense MLP or the MoE (router, top-k, grouped expert GEMMs, weighted combine)."""
        ws = self.sets[layer % self.copies]
        s = self.shape

        def run() -> None:
            self.x.add_(F.linear(self.attn, ws["o"], ws.get("o_b")))  # x: [T, H]
            h = F.rms_norm(self.x, (s.hidden_size,), ws["norm_post"], 1e-5)
            if s.is_moe:
                self.x.add_(self._moe(h, ws))
            else:
                g, u = F.linear(h, ws["gate_up"]).chunk(2, dim=-1)  # [T, I/tp] each
                self.x.add_(F.linear(F.silu(g) * u, ws["down"]))
        return run

    def _moe(self, h: torch.Tensor, ws: dict) -> torch.Tensor:
        s = self.shape
        logits = F.linear(h, ws["router"], ws.get("router_b"))  # [T, E]
        top_w, _ = torch.topk(logits, s.top_k, dim=-1)  # [T, k]
        top_w = torch.softmax(top_w.float(), dim=-1).to(h.dtype)
        y = self._experts(h.index_select(0, self.route_idx), ws)  # dispatched rows: [E_local * n, H]
        y = y * top_w.reshape(-1).index_select(0, self.weight_idx)[:, None]
        return torch.zeros_like(h).index_add_(0, self.route_idx, y)  # combine: [T, H]

    def _experts(self, xe: torch.Tensor, ws: dict) -> torch.Tensor:
        """The local experts on their routed rows ``xe [E_local * n, H]``: gate/up, clamped SwiGLU, down."""
        s = self.shape
        if self.grouped == "grouped_mm":
            gu = torch._grouped_mm(xe, ws["gate_up"], offs=self.offs)  # [E_local * n, 2I]
        else:
            gu = torch.bmm(xe.view(s.local_experts, -1, s.hidden_size), ws["gate_up"]).flatten(0, 1)
        g, u = gu.chunk(2, dim=-1)
        g = g.clamp(max=SWIGLU_LIMIT)
        act = g * torch.sigmoid(1.702 * g) * (u.clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT) + 1)  # [E_local * n, I]
        if self.grouped == "grouped_mm":
            y = torch._grouped_mm(act, ws["down"], offs=self.offs)  # [E_local * n, H]
        else:
            y = torch.bmm(act.view(s.local_experts, -1, act.shape[-1]), ws["down"]).flatten(0, 1)
        return y  # [E_local * n, H]


class SpinRest:
    """``--layer-rest-us N``: N µs of GPU work per layer instead of the model's, half before attention and
    half after (``torch.cuda._sleep`` of a cycle count calibrated once with CUDA events; on CPU a busy wait)."""

    def __init__(self, us_per_layer: float, device: torch.device) -> None:
        self.us = float(us_per_layer)
        self.device = device
        self.cycles = 0
        if device.type == "cuda" and self.us > 0:
            self.cycles = max(1, int(self.us / 2 * cycles_per_us(device)))

    def _half(self) -> Call:
        if self.us <= 0:
            return lambda: None
        if self.device.type == "cuda":
            cycles = self.cycles
            return lambda: torch.cuda._sleep(cycles)
        half_s = self.us / 2 * 1e-6

        def spin() -> None:
            t_end = time.perf_counter() + half_s
            while time.perf_counter() < t_end:
                pass
        return spin

    def before_attention(self, layer: int) -> Call:
        return self._half()

    def after_attention(self, layer: int) -> Call:
        return self._half()

    def after_steps(self, layer: int) -> list[tuple[str, Call, str]]:
        return [("after_attention", self._half(), "layer")]

    a2a_bytes = 0

    def reset(self) -> None:
        pass


def cycles_per_us(device: torch.device, cycles: int = 2_000_000) -> float:
    """GPU clock cycles ``torch.cuda._sleep`` spends per µs on ``device``, timed with CUDA events (after one
    warm-up launch). The SM clock can move later; the rows record the clocks they saw."""
    with torch.cuda.device(device):
        torch.cuda._sleep(cycles // 10)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / (start.elapsed_time(end) * 1e3)
