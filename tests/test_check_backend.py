"""``cpbench check-backend``: cpbench's CPU backend and the example plugin pass it, the example's twin without sinks
fails it naming the cell and what to look at, bad input exits 2 in one line, and each part names what it found."""

import json
from importlib import metadata

import pytest
import torch

from cpbench.kernels.backends import plugins, registry
from cpbench.kernels.backends.registry import get_backend, get_spec
from cpbench.kernels.workload import build_cell, rank_work
from cpbench.domain.geometry import all_ranks
from cpbench.commands import check_backend as cb
from cpbench.commands.check_probes import BASE, PROBES, diagnosis
from clirun import cpbench
from exampleplugin import example_site, installed  # noqa: F401 (fixtures)

CPU = ("--device", "cpu", "--budget-ms", "5")
NO_SINKS = "cpbench_plugin_example.backend:NoSinksBackend"


def verdicts(result) -> dict:
    """part -> (result, detail) of a ``check-backend --json`` run."""
    return {v["part"]: (v["result"], v["detail"]) for v in json.loads(result.stdout)["verdicts"]}


def cells(v: dict) -> dict:
    return {part[len("cell: "):]: res for part, (res, _) in v.items() if part.startswith("cell: ")}


@pytest.mark.slow
def test_the_torch_reference_passes_and_the_cuda_parts_say_they_are_skipped():
    r = cpbench("check-backend", "torch", *CPU, "--json")
    assert r.returncode == 0, r.stdout
    v = verdicts(r)
    assert cells(v) == dict.fromkeys((p.name for p in PROBES), "pass")
    assert v["kernel patterns"] == ("skip", "kernel names come from a CUDA trace (torch.profiler); this device is "
                                            "the CPU")
    assert v["timing graph"] == ("skip", "CUDA graphs need a CUDA device")
    assert v["declaration imports no torch"] == ("pass", "cpbench.kernels.backends.builtin imports no torch")
    assert v["prepare()"][1].startswith("a Prepared of 2 layers, attention calls per layer: two-call 2, fused 1; "
                                        "outputs [23, 8, 64] bfloat16")
    assert v["timing eager"][0] == "pass" and json.loads(r.stdout)["hints"] == []


@pytest.mark.slow
def test_the_example_plugin_passes(installed):
    r = cpbench("check-backend", "example", *CPU, "--json")
    assert r.returncode == 0, r.stdout
    v = verdicts(r)
    assert v["declaration"] == ("pass", "cpbench_plugin_example.specs:EXAMPLE of cpbench-plugin-example 0.1.0; runs "
                                        "on cpu, cuda any; modes two-call, fused; kernel patterns none")
    assert v["declaration imports no torch"][0] == "pass" and set(cells(v).values()) == {"pass"}


@pytest.mark.slow
def test_the_twin_without_sinks_fails_on_the_cells_with_sinks_and_says_where_to_look(installed):
    r = cpbench("check-backend", NO_SINKS, *CPU, env={"COLUMNS": "200"})
    assert r.returncode == 1
    assert f"{NO_SINKS}: FAILS (cell: sinks, cell: cp 4, all)" in r.stdout
    assert "look at: wrong only with sinks: exp(sink_h) is added once to every softmax denominator" in r.stdout
    r = cpbench("check-backend", NO_SINKS, *CPU, "--json")
    v = verdicts(r)
    assert cells(v) == {"causal": "pass", "prefix": "pass", "sinks": "fail", "window": "pass", "swa pool": "pass",
                        "cp 4, all": "fail"}
    detail = v["cell: sinks"][1]
    assert "mismatch: max |err|" in detail and "> tolerance 0.02 against the fp32 torch reference" in detail
    assert float(detail.split("max |err| ")[1].split()[0]) > 0.1  # not a rounding case: the sinks are missing
    assert v["declaration"][0] == "skip" and "named by its class, not registered" in v["declaration"][1]


@pytest.mark.parametrize("args,line", [
    (("nope",), "error: unknown backend 'nope': use one of auto, torch"),
    (("no_such_module_xyz:B",), "cannot import no_such_module_xyz (ModuleNotFoundError"),
    (("fa3",), "error: backend fa3 runs on 9.0; this device is a CPU: run check-backend where it runs (--device)"),
    (("torch", "--budget-ms", "0"), "error: --budget-ms must be > 0, got 0")])
def test_bad_input_exits_2_in_one_line(args, line):
    r = cpbench("check-backend", *args, "--device", "cpu")
    assert r.returncode == 2 and line in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_class_that_breaks_the_protocol_fails_at_the_class_and_the_rest_is_skipped():
    r = cpbench("check-backend", "pluginfakes:NoPrepare", *CPU, "--json")
    assert r.returncode == 1
    v = verdicts(r)
    assert v["class"][0] == "fail" and "breaks the backend protocol: it has no `prepare` method" in v["class"][1]
    assert v["cells"] == ("skip", "the class failed")


def test_a_plugin_left_out_fails_at_its_declaration(monkeypatch):
    eps = [metadata.EntryPoint("nofused", "pluginfakes:NO_FUSED", plugins.GROUP)]
    monkeypatch.setattr(plugins, "entry_points", lambda: eps)
    registry.reload()
    try:
        r = cpbench("check-backend", "fake-no-fused", *CPU, "--json")
    finally:
        monkeypatch.undo()
        registry.reload()
    assert r.returncode == 1
    assert verdicts(r) == {"declaration": ("fail", "left out: modes ('two-call',) must be a tuple holding two-call and "
                                                   "fused, and cp-native where the backend has that call "
                                                   "(docs/backends.md) (nofused = pluginfakes:NO_FUSED (no "
                                                   "distribution))")}


def test_a_declaration_module_that_imports_torch_is_named(monkeypatch):
    eps = [metadata.EntryPoint("heavy", "pluginfakes_torch:SPEC", plugins.GROUP)]
    monkeypatch.setattr(plugins, "entry_points", lambda: eps)
    registry.reload()
    try:
        report = cb.CheckReport("fake-heavy", "cpu", "bf16")
        cb._declaration(report, get_spec("fake-heavy"), "fake-heavy")
    finally:
        monkeypatch.undo()
        registry.reload()
    assert report.verdicts[1] == cb.Verdict("declaration imports no torch", "fail", "importing pluginfakes_torch "
                                            "imports torch, which every cpbench command then pays for: move the "
                                            "backend class to a module of its own")


def test_prepare_problems_are_named():
    p = PROBES[-1]
    model = p.model()
    cell = build_cell(model, p.extend, p.prefix, page_size=16, dtype=torch.float32, device="cpu")
    work = rank_work(cell, all_ranks(p.extend, p.prefix, p.cp)[0])
    spec = get_spec("torch")
    two = get_backend("torch").prepare(work, "two-call")
    assert cb._prepared_problem(two, spec, model, "two-call", work.q) is None
    assert cb._prepared_problem(two, spec, model, "fused", work.q) == "[2] attention calls per layer, fused makes 1"
    assert cb._prepared_problem(two, spec, model, "two-call", work.q.half()) == (
        "output of kind 7 is [23, 8, 64] torch.float32 on cpu, not [tokens, Hq, D] torch.float16 on cpu as the "
        "queries")
    import dataclasses

    other = dataclasses.replace(spec, kernel_patterns=("my_kernel",))
    assert cb._prepared_problem(two, other, model, "two-call", work.q) == (
        "Prepared.kernel_patterns () differ from the declared ('my_kernel',)")
    assert cb._prepared_problem({"layers": []}, spec, model, "two-call", work.q) == (
        "returned a dict, not a cpbench Prepared")


def test_the_diagnosis_names_the_feature_that_fails_alone():
    hint = {p.name: p.hint for p in PROBES}
    assert diagnosis([]) == []
    assert diagnosis(["causal", "sinks", "cp 4, all"]) == [BASE.hint]  # the plain cell first
    assert diagnosis(["sinks", "window", "cp 4, all"]) == [hint["sinks"], hint["window"]]
    assert diagnosis(["cp 4, all"]) == [hint["cp 4, all"]]  # every feature passes alone
