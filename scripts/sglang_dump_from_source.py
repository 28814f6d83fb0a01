"""Write a zigzag CP metadata dump with SGLang's own code, without a server or a GPU.

``cpbench geometry --check DUMP`` compares SGLang's ``ZigzagContextParallelMetadata`` with cpbench's
geometry. docs/sglang-dump.md shows how a running SGLang writes that dump; this script writes the same
files from an SGLang source tree alone: it imports ``sglang/srt/layers/cp/zigzag.py`` from ``--sglang-src``
(an unpacked wheel, or ``python/`` of a git checkout), runs ``ZigzagCPStrategy.build_metadata`` for every CP
rank of one batch, then ``pad_logical_token_to_physical`` (``layers/cp/padding.py``), the two calls
``prepare_cp_forward`` (``layers/cp/utils.py``) makes, with the arguments it passes them. Each rank goes to
``OUT/rank{r}.json`` with the hook's keys: the batch (``cp_size``, ``cp_rank``, ``extend_seq_lens``,
``extend_prefix_lens``, ``seq_lens``), then every field of the metadata dataclass, tensors as lists.

``build_metadata`` is list arithmetic plus ``torch.tensor(..., dtype=torch.int32)``, so only torch is
needed. The modules that zigzag.py, base.py and padding.py import for other work (NCCL allocators, the KV
pool, the runtime context of a launched server) are replaced by small stand-ins in ``sys.modules`` before
the import; see :func:`install_stand_ins`. The parallel context stand-in carries the CP size and the rank
that ``ContextParallelStrategy.cp_rank`` reads.

Not in the dump: the attention backend's page tables (``page_table``, ``zigzag_page_table``, ...). The
TRT-LLM backend builds them from the engine's KV pool, which this script does not have.

Usage::

    python3 scripts/sglang_dump_from_source.py --sglang-src /tmp/sglang/python --out DIR \\
        [--cp 4] [--extend-lens 11,13] [--prefix-lens 8,14]
    cpbench geometry --check DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
import types
from pathlib import Path

ZIGZAG = Path("sglang", "srt", "layers", "cp", "zigzag.py")


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _not_here(what: str):
    """A stand-in callable for engine machinery that build_metadata never calls: it says so if called."""
    def call(*args, **kwargs):
        raise RuntimeError(f"{what} is a stand-in of scripts/sglang_dump_from_source.py: it needs a running "
                           "SGLang engine")
    return call


def install_stand_ins(src: Path, parallel: types.SimpleNamespace) -> None:
    """Put stand-ins for the heavy imports of zigzag.py / base.py / padding.py into ``sys.modules``.

    ``parallel`` plays SGLang's parallel context (``runtime_context.get_parallel()``): base.py reads the
    rank from ``attn_cp_rank``, and padding.py / ``get_cp_strategy`` read ``attn_cp_size``,
    ``enable_prefill_cp`` and ``cp_strategy``.
    """
    def module(name: str, path: Path | None = None, **attrs) -> None:
        m = types.ModuleType(name)
        if path is not None:
            m.__path__ = [str(path)]  # a package: its submodules load from the source tree
        m.__dict__.update(attrs)
        sys.modules[name] = m

    # Packages whose __init__ would import the whole engine (sglang/__init__.py loads the frontend language
    # and HF patches; layers/cp/__init__.py loads the interleave strategy too). As bare packages, only the
    # submodules asked for load from the source tree; sglang.srt and sglang.srt.layers are namespace
    # packages and need nothing.
    module("sglang", src / "sglang")
    module("sglang.srt.layers.cp", src / "sglang" / "srt" / "layers" / "cp")

    # The runtime context of a launched server: the parallel layout and the device.
    module("sglang.srt.runtime_context", get_parallel=lambda: parallel,
           get_device=lambda: types.SimpleNamespace(device="cpu"))
    # Used by zigzag.py's all-gather and KV-cache writes, never by build_metadata.
    module("sglang.srt.distributed.device_communicators.pynccl_allocator",
           use_symmetric_memory=_not_here("use_symmetric_memory"))
    module("sglang.srt.layers.dp_attention", is_allocation_symmetric=_not_here("is_allocation_symmetric"))
    module("sglang.srt.mem_cache.memory_pool", KVWriteLoc=types.SimpleNamespace(
        for_layer=_not_here("KVWriteLoc.for_layer"), for_batch=_not_here("KVWriteLoc.for_batch")))
    module("sglang.srt.model_executor.forward_context", get_token_to_kv_pool=_not_here("get_token_to_kv_pool"))


def sglang_version() -> str:
    """The version the source tree says (``sglang/_version.py`` of a wheel or a built checkout)."""
    try:
        return str(importlib.import_module("sglang._version").__version__)
    except Exception:  # a checkout without a build has no _version.py
        return "unknown (no sglang/_version.py in the source tree)"


def _as_json(v):
    """What the docs/sglang-dump.md hook writes for a value json cannot: a tensor's list, else its type."""
    return v.tolist() if hasattr(v, "tolist") else type(v).__name__


def dump(src: Path, cp: int, extend: list[int], prefix: list[int], out: Path) -> list[Path]:
    """Build every rank's metadata with SGLang's code and write ``out/rank{r}.json``; the files written.

    Raises:
        SystemExit: SGLang's ``can_apply`` says the batch runs without CP (no metadata is built then).
    """
    parallel = types.SimpleNamespace(enable_prefill_cp=True, attn_cp_size=cp, cp_strategy="zigzag",
                                     attn_cp_rank=0)
    install_stand_ins(src, parallel)
    base = importlib.import_module("sglang.srt.layers.cp.base")
    padding = importlib.import_module("sglang.srt.layers.cp.padding")
    zigzag = importlib.import_module("sglang.srt.layers.cp.zigzag")

    seq_lens = [p + e for p, e in zip(prefix, extend)]
    num_tokens = sum(extend)  # prepare_cp_forward passes the extend total when the extend lengths are known
    batch = types.SimpleNamespace(extend_seq_lens_cpu=extend, seq_lens_cpu=seq_lens, extend_prefix_lens_cpu=prefix)
    records = []
    for rank in range(cp):
        parallel.attn_cp_rank = rank
        strategy = base.get_cp_strategy()  # built lazily from the parallel context, as in a worker
        assert isinstance(strategy, zigzag.ZigzagCPStrategy) and strategy.cp_rank == rank
        if not strategy.can_apply(num_tokens, batch):
            sys.exit(f"SGLang's ZigzagCPStrategy.can_apply says cp {cp}, extend {extend} runs without CP "
                     f"(every extend length must be >= 2 * cp_size = {2 * cp}): no metadata to dump")
        meta = strategy.build_metadata(num_tokens=num_tokens, seqs_len=seq_lens, extend_seqs_len=extend)
        padding.pad_logical_token_to_physical(meta)
        record = {"cp_size": strategy.cp_size, "cp_rank": strategy.cp_rank,
                  "extend_seq_lens": batch.extend_seq_lens_cpu, "extend_prefix_lens": batch.extend_prefix_lens_cpu,
                  "seq_lens": batch.seq_lens_cpu}
        record.update({f.name: getattr(meta, f.name) for f in dataclasses.fields(meta)})
        records.append(json.dumps(record, default=_as_json) + "\n")
    out.mkdir(parents=True, exist_ok=True)
    written = [out / f"rank{rank}.json" for rank in range(cp)]
    for path, text in zip(written, records):
        path.write_text(text)
    return written


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sglang-src", type=Path, required=True,
                    help=f"directory holding the sglang package ({ZIGZAG} under it): an unpacked wheel, "
                         "or python/ of a git checkout")
    ap.add_argument("--out", type=Path, required=True, help="directory for rank{r}.json")
    ap.add_argument("--cp", type=int, default=4, help="CP size (default 4)")
    ap.add_argument("--extend-lens", type=_ints, default=[11, 13], help="tokens each request adds (default 11,13)")
    ap.add_argument("--prefix-lens", type=_ints, default=[8, 14],
                    help="cached tokens before each request's extend (default 8,14); one value for all")
    args = ap.parse_args(argv)
    src = args.sglang_src.resolve()
    if not (src / ZIGZAG).is_file():
        ap.error(f"--sglang-src {str(args.sglang_src)!r} has no {ZIGZAG}")
    prefix = args.prefix_lens * len(args.extend_lens) if len(args.prefix_lens) == 1 else args.prefix_lens
    if args.cp < 2 or not args.extend_lens or len(prefix) != len(args.extend_lens) or min(prefix) < 0:
        ap.error("needs --cp >= 2 and one prefix length >= 0 per extend length")
    written = dump(src, args.cp, args.extend_lens, prefix, args.out)
    print(f"SGLang {sglang_version()} from {src}: cp {args.cp}, extend {args.extend_lens}, prefix {prefix}; "
          f"wrote {', '.join(str(p) for p in written)}")


if __name__ == "__main__":
    main()
