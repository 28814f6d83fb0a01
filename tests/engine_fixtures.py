"""The engine traces of ``tests/fixtures/engine_traces`` (other projects' profiles, xz-recompressed; see its
README), decompressed into a test's temporary directory for ``cpbench profile --from``."""

from __future__ import annotations

import lzma
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "engine_traces"
SGLANG_MI300X = "sglang_qwen3-8b_mi300x.json.xz"  # ck_tile FmhaBatchPrefillWithPagedKVCacheKernel x36, world size 1
HF_SDPA_H100 = "hf_qwen1.5-0.5b_h100_sdpa.json.xz"  # pytorch_flash::flash_fwd_kernel x34, 24 layers
VLLM_AMD_GRAPHS = "vllm_amd_piecewise_graph.json.xz"  # Triton kernel_unified_attention_2d x24, world size 1
NSYS_2GPU = "nsysai_mfu_2gpu.sqlite.xz"  # Dao flash::flash_fwd_kernel x30 per process, 2 processes


def unpack(name: str, directory: Path) -> Path:
    """``name`` (a file of the fixtures directory) decompressed into ``directory``, without its ``.xz``."""
    out = Path(directory) / name.removesuffix(".xz")
    out.write_bytes(lzma.decompress((FIXTURES / name).read_bytes()))
    return out
