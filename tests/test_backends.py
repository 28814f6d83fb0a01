"""Backend registry, `auto`, refusal reasons, and the FlashInfer wrappers' plans (wrappers patched)."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from cpbench.kernels.backends import get_backend, resolve_auto
from cpbench.domain.geometry import rank_geometry
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.workload import build_cell, rank_work
from cpbench.errors import CpbenchInputError
from clirun import cpbench

CPU = torch.device("cpu")


def test_auto_on_cpu_is_torch():
    assert resolve_auto(CPU) == "torch"


@pytest.mark.parametrize("cc,expect", [((10, 0), "trtllm-gen"), ((9, 0), "trtllm-fmha-v2"), ((8, 9), "flashinfer-fa2"),
                                       ((12, 0), "trtllm-fmha-v2")])
def test_auto_on_gpus(monkeypatch, cc, expect):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cc)
    assert resolve_auto(torch.device("cuda")) == expect


def test_unknown_backend():
    with pytest.raises(CpbenchInputError, match="unknown backend"):
        get_backend("fa4")


@pytest.mark.parametrize("name", ["flashinfer-fa2", "flashinfer-fa3", "trtllm-fmha-v2", "trtllm-gen"])
def test_gpu_backends_refuse_cpu_with_reason(name):
    reason = get_backend(name).supports(CPU, get_preset("llama-3.1-8b"), torch.bfloat16)
    assert reason and "\n" not in reason and "--backend torch" in reason


def test_flashinfer_fa3_refused_off_hopper(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setitem(sys.modules, "flashinfer", types.SimpleNamespace(__version__="0.7.2.post1"))
    reason = get_backend("flashinfer-fa3").supports(torch.device("cuda"), get_preset("llama-3.1-8b"), torch.bfloat16)
    assert "9.0" in reason and "8.0" in reason


def test_trtllm_refused_on_hopper(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    reason = get_backend("trtllm-gen").supports(torch.device("cuda"), get_preset("gpt-oss-120b"), torch.bfloat16)
    assert "10.x" in reason and "9.0" in reason


def test_flashinfer_missing_reason(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import fails
    reason = get_backend("flashinfer-fa2").supports(torch.device("cuda"), get_preset("llama-3.1-8b"), torch.bfloat16)
    assert "not installed" in reason and "cpbench[flashinfer]" in reason


class _FakeWrapper:
    """Records FlashInfer wrapper construction, plan and run arguments (no kernels)."""

    log: list = []

    def __init__(self, workspace, **kw):
        self.kw = kw

    def plan(self, qo_indptr, kv_indptr, kv_indices, last_page_len, *args, **kw):
        self.window_left = kw["window_left"]
        _FakeWrapper.log.append(dict(kind=type(self).__name__, init=self.kw, qo=qo_indptr.tolist(),
                                     kv_indptr=kv_indptr.tolist(), kv_indices=kv_indices.tolist(),
                                     last=last_page_len.tolist(), args=args, **kw))

    def run(self, q, kv, *rest, out):
        _FakeWrapper.ran.append(dict(window_left=self.window_left, kv=kv))
        out.copy_(q)


def _fa_plans(monkeypatch, mode, split_kv=True, swa_pool=False):
    from cpbench.kernels.backends.flashinfer_fa import FlashInferBackend

    pkg = types.ModuleType("flashinfer")
    pkg.BatchPrefillWithPagedKVCacheWrapper = type("BatchPrefillWithPagedKVCacheWrapper", (_FakeWrapper,), {})
    pkg.BatchAttentionWithAttentionSinkWrapper = type("BatchAttentionWithAttentionSinkWrapper", (_FakeWrapper,), {})
    monkeypatch.setitem(sys.modules, "flashinfer", pkg)
    monkeypatch.setattr(_FakeWrapper, "log", [])
    monkeypatch.setattr(_FakeWrapper, "ran", [], raising=False)
    be = FlashInferBackend("fa2", split_kv=split_kv)
    monkeypatch.setattr(be, "supports", lambda *a: None)
    model = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=8, kv_heads=2, head_dim=16, page_size=4)
    cell = build_cell(model, [11, 13], [8, 14], page_size=4, dtype=torch.bfloat16, device="cpu", context_len=64,
                      swa_pool=swa_pool)
    work = rank_work(cell, rank_geometry([11, 13], [8, 14], 4, 0))
    prep = be.prepare(work, mode)
    prep.forward()
    return _FakeWrapper.log, cell, prep


def test_fa_fused_plans_the_combined_segments_over_the_duplicated_table(monkeypatch):
    plans, cell, prep = _fa_plans(monkeypatch, "fused")
    assert len(plans) == 2  # one fused plan per layer kind (window 127, full)
    assert [p["window_left"] for p in plans] == [127, -1]
    p = plans[0]
    assert p["kind"] == "BatchAttentionWithAttentionSinkWrapper" and p["init"]["window_left"] == 127
    assert p["qo"] == [0, 2, 4, 5, 6]  # 2*bs segments: prev blocks then next blocks (docs/design.md §1 vector)
    assert p["kv_indptr"] == [0, 3, 7, 12, 19]  # pages of kv lengths 10, 16, 19, 27 at page_size 4
    bt = cell.block_tables.tolist()
    assert p["kv_indices"] == bt[0][:3] + bt[1][:4] + bt[0][:5] + bt[1][:7]  # rows of the duplicated table
    assert p["last"] == [2, 4, 3, 3]
    assert p["args"] == (8, 2, 16, 4) and p["causal"] is True and p["sm_scale"] == 16 ** -0.5
    assert "disable_split_kv" not in p  # FlashInfer's default planner
    assert prep.calls_per_layer == 1 and set(prep.setup_us) == {"page_table", "metadata", "plan", "outputs"}
    assert prep.setup_mem == {}  # CPU: no allocator statistics


@pytest.mark.parametrize("mode", ["fused", "two-call"])
def test_fa_window_plans_read_the_swa_pool(monkeypatch, mode):
    """--swa-pool: the window kind's plans index the SWA pool's table (fused: its duplicate, cat(t, t)) and
    its layer runs on the SWA pool's caches; the full kind's plans and layer keep the full pool's."""
    plans, cell, prep = _fa_plans(monkeypatch, mode, swa_pool=True)
    bt, swa = cell.block_tables.tolist(), cell.swa_block_tables.tolist()
    if mode == "fused":
        want = {127: [swa[0][:3] + swa[1][:4] + swa[0][:5] + swa[1][:7]],  # rows of cat(swa, swa) [2*bs, W]
                -1: [bt[0][:3] + bt[1][:4] + bt[0][:5] + bt[1][:7]]}
    else:  # prev (kv 10, 16), next (kv 19, 27) over the plain tables
        want = {127: [swa[0][:3] + swa[1][:4], swa[0][:5] + swa[1][:7]],
                -1: [bt[0][:3] + bt[1][:4], bt[0][:5] + bt[1][:7]]}
    assert {w: [p["kv_indices"] for p in plans if p["window_left"] == w] for w in (127, -1)} == want
    assert [p["last"] for p in plans if p["window_left"] == 127] == [p["last"] for p in plans if p["window_left"] == -1]
    ran = {r["window_left"]: r["kv"] for r in _FakeWrapper.ran}
    ptrs = lambda kv: [t.data_ptr() for t in kv]  # noqa: E731
    assert ptrs(ran[127]) == ptrs(cell.swa_kv_buffers[0]) and ptrs(ran[-1]) == ptrs(cell.kv_buffers[0])
    assert "swa_page_table" in prep.setup_us and len(prep.held) == 1
    assert prep.held[0].shape[0] == (4 if mode == "fused" else 2)


def test_fa_two_call_plans_prev_and_next_and_split_kv_off(monkeypatch):
    plans, cell, prep = _fa_plans(monkeypatch, "two-call", split_kv=False)
    assert len(plans) == 4 and prep.calls_per_layer == 2  # (prev, next) x layer kinds
    prev, nxt = plans[0], plans[1]
    assert prev["qo"] == [0, 2, 4] and prev["kv_indptr"] == [0, 3, 7]
    assert nxt["qo"] == [0, 1, 2] and nxt["kv_indptr"] == [0, 5, 12]
    assert all(p["disable_split_kv"] is True for p in plans)


def test_doctor_json_on_cpu_exits_0_with_reasons(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without a GPU
    r = cpbench("doctor", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert all(" " not in k and k == k.lower() for k in info["environment"])  # snake_case keys for scripts
    assert info["environment"]["auto_backend"] == "torch" and info["environment"]["torch"] == torch.__version__
    assert info["backends"]["torch"] is None
    for name in ("flashinfer-fa2", "flashinfer-fa3", "trtllm-fmha-v2", "trtllm-gen"):
        assert "none is in use" in info["backends"][name]


def test_doctor_without_flashinfer_says_so_for_the_jit_cache(monkeypatch, tmp_path):
    from cpbench.commands import doctor

    (tmp_path / "flashinfer").mkdir()  # a directory named flashinfer is not an installed flashinfer
    monkeypatch.syspath_prepend(str(tmp_path))
    real = doctor.pkg_version
    monkeypatch.setattr(doctor, "pkg_version", lambda name: None if name == "flashinfer-python" else real(name))
    assert doctor.diagnose()["environment"]["flashinfer_jit_cache"] == "- (flashinfer is not installed)"
    monkeypatch.setattr(doctor, "pkg_version", lambda name: "0.7.2" if name == "flashinfer-python" else real(name))
    assert "flashinfer is not installed" not in doctor.diagnose()["environment"]["flashinfer_jit_cache"]


def test_doctor_says_when_the_jit_cache_will_rebuild(tmp_path):
    from cpbench.commands.doctor import jit_cache

    cache, pkg = tmp_path / "cache", tmp_path / "flashinfer"
    (cache / "0.7.2.post1" / "90a" / "cached_ops" / "m").mkdir(parents=True)
    so = cache / "0.7.2.post1" / "90a" / "cached_ops" / "m" / "m.so"
    so.write_bytes(b"x" * 2**20)
    (pkg / "data" / "include").mkdir(parents=True)
    header = pkg / "data" / "include" / "prefill.cuh"
    header.write_text("//")
    os.utime(header, (1e9, 1e9))  # installed long before the module was built: cache is fresh
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "jit.cpython-312.pyc").write_bytes(b"")  # written at import: not a build input
    fresh = jit_cache(cache, pkg)
    assert fresh == f"{cache}: 1 compiled modules, 1 MiB"
    os.utime(header, (so.stat().st_mtime + 60,) * 2)  # reinstalled after: ninja rebuilds
    assert "will rebuild them on first use" in jit_cache(cache, pkg)
    assert "no cache yet" in jit_cache(tmp_path / "nothing", pkg)


def test_doctor_without_torch_exits_0_and_says_why():
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import notorch; "
            "sys.argv = ['cpbench', 'doctor', '--json']; "
            "from cpbench.cli.app import main; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-1000:]
    info = json.loads(r.stdout)
    why = info["environment"]["torch"]
    assert why.startswith("torch cannot be imported") and "pip install torch" in why
    assert info["backends"] == dict.fromkeys(["torch", "flashinfer-fa2", "flashinfer-fa3", "fa3", "trtllm-fmha-v2",
                                              "trtllm-gen", "flex"], "needs torch, which cannot be imported")


def test_doctor_jit_cache_in_odd_environments(tmp_path, monkeypatch):
    from pathlib import Path

    from cpbench.commands.doctor import diagnose, jit_cache

    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(afile))
    assert jit_cache().endswith("is not a directory: flashinfer cannot cache kernels")
    cache = tmp_path / "base" / ".cache" / "flashinfer" / "0.7.2.post1"
    cache.mkdir(parents=True)
    (cache / "gone.so").symlink_to(tmp_path / "nonexistent")  # a broken link is not a compiled module
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "base"))
    assert jit_cache().endswith(": 0 compiled modules, 0 MiB")
    monkeypatch.delenv("FLASHINFER_WORKSPACE_BASE")

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert jit_cache().startswith("unknown (Could not determine home directory.)")
    assert diagnose()["backends"]["torch"] is None  # the rest of doctor still runs
