"""Backend plugins: declarations read through one loader (cpbench's own first, then the ``cpbench.backends`` entry
points), a plugin left out with its reason while the others load, the example plugin package installed with pip,
listed by ``cpbench doctor`` and swept on the CPU, rows recording the backend's distribution (docs/backends.md)."""

import json
import os
import subprocess
import sys
import warnings
from importlib import metadata

import pytest

import cpbench
from cpbench.kernels.backends import plugins, registry
from cpbench.kernels.backends.builtin import SPECS
from cpbench.kernels.backends.spec import BackendSpec, spec_problem
from cpbench.errors import CpbenchInputError, CpbenchWarning
from cpbench.results.store import RunDir, read_jsonl
from clirun import cpbench as run_cli
from exampleplugin import EXAMPLE, example_site, installed  # noqa: F401 (fixtures)

SRC = EXAMPLE.parent.parent / "src"

OWN = ("torch", "flashinfer-fa2", "flashinfer-fa3", "fa3", "trtllm-fmha-v2", "trtllm-gen", "flex")
FAKES = {"fake-good": "pluginfakes:GOOD", "gone": "no_such_module_xyz:SPEC", "clash": "pluginfakes:CLASH",
         "nofused": "pluginfakes:NO_FUSED", "dict": "pluginfakes:NOT_A_SPEC", "several": "pluginfakes:SEVERAL"}
# a tiny CPU sweep: 2 layers (window and full), GQA, sinks, fp32
SWEEP = ("--device", "cpu", "--cp", "2", "--bs", "1", "--extend-len", "64", "--layers", "2", "--heads", "8",
         "--kv-heads", "2", "--head-dim", "16", "--page-size", "16", "--dtype", "fp32", "--timing", "eager",
         "--budget-ms", "5", "--warmup", "0", "--no-profile", "--no-report")


def entry_points(names=FAKES):
    return [metadata.EntryPoint(n, FAKES[n], plugins.GROUP) for n in names]


@pytest.fixture
def fakes(monkeypatch):
    """The made-up plugins of pluginfakes.py as the installed entry points; the registry read again (and after)."""
    eps = entry_points()
    monkeypatch.setattr(plugins, "entry_points", lambda: eps)
    registry.reload()
    yield eps
    monkeypatch.undo()
    registry.reload()


def test_cpbench_own_backends_load_through_the_plugin_loader():
    found = plugins.discover([])
    assert tuple(found.specs) == OWN and found.left_out == []
    assert {(s.dist, s.version, s.origin) for s in found.specs.values()} == {("cpbench", cpbench.__version__,
                                                                              "cpbench.kernels.backends.builtin:SPECS")}
    assert [spec_problem(s) for s in SPECS] == [None] * len(OWN)
    assert found.specs["fa3"].modes == found.specs["flex"].modes == ("two-call", "fused", "cp-native")
    assert found.specs["torch"].modes == ("two-call", "fused")


def test_a_plugin_that_fails_clashes_or_breaks_the_rules_is_left_out_and_the_others_load():
    found = plugins.discover(entry_points())
    assert tuple(found.specs) == (*OWN, "fake-good", "fake-one")
    good = found.specs["fake-good"]
    assert (good.dist, good.version, good.origin, good.impl) == ("", "", "pluginfakes:GOOD", pluginfakes_torch_ref())
    reasons = {lo.names: lo.reason for lo in found.left_out}
    assert reasons == {
        ("gone",): "cannot be imported (ModuleNotFoundError: No module named 'no_such_module_xyz'): reinstall it or "
                   "fix the entry point",
        ("torch",): f"name 'torch' is taken by cpbench {cpbench.__version__}: give the backend another name "
                    "(docs/backends.md)",
        ("fake-no-fused",): "modes ('two-call',) must be a tuple holding two-call and fused, and cp-native where the "
                            "backend has that call (docs/backends.md)",
        ("dict",): "declares a dict, not a cpbench BackendSpec (docs/backends.md)",
        ("Fake Two",): "name 'Fake Two' is not a backend name (lower-case letters, digits, '.', '_', '-'; not "
                       "'auto') (docs/backends.md)"}
    assert found.left_out[0].line == ("backend plugin gone = no_such_module_xyz:SPEC (no distribution) left out: "
                                      + reasons[("gone",)])


def pluginfakes_torch_ref() -> str:
    return "cpbench.kernels.backends.torch_ref:TorchBackend"


@pytest.mark.parametrize("change,problem", [
    (dict(kernel_patterns=("Upper",)), "kernel_patterns ('Upper',) is not a tuple of non-empty lower-case strings"),
    (dict(impl="no_colon"), "impl 'no_colon' is not 'module:Class'"),
    (dict(name="auto"), "name 'auto' is not a backend name"),
    (dict(cpu=False, cuda_min=None), "it runs nowhere: set cpu=True, cuda_min, or both"),
    (dict(cuda_exact=(9, 0)), "cuda_exact (9, 0) is not a tuple of (major, minor) tuples"),
    (dict(modes=("two-call", "fused", "ring")), "modes ('two-call', 'fused', 'ring') must be a tuple"),
    (dict(description=" "), "description is empty: one line for cpbench doctor")])
def test_spec_problem_names_what_is_wrong(change, problem):
    import dataclasses

    spec = dataclasses.replace(SPECS[0], **change)
    assert spec_problem(spec).startswith(problem)


def test_left_out_plugins_are_warned_once_a_line_each_and_named_when_asked_for(fakes):
    with pytest.warns(CpbenchWarning) as seen:
        assert registry.get_spec("torch").dist == "cpbench"
    lines = [str(w.message) for w in seen]
    assert len(lines) == 5 and all(line.startswith("backend plugin ") and "\n" not in line for line in lines)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry.get_spec("fake-good")  # once per reading of the declarations
    with pytest.raises(CpbenchInputError, match=r"^backend 'gone' was left out: cannot be imported \(ModuleNot"):
        registry.get_spec("gone")
    assert "fake-good" in registry.CHOICES and "gone" not in registry.CHOICES
    assert registry.resolve_auto("cpu") == "torch"  # a plugin runs when named; auto picks cpbench's own


def test_the_cli_names_left_out_plugins_in_one_line_each_and_the_sweep_runs(fakes, tmp_path):
    r = run_cli("sweep", "--backend", "fake-good", *SWEEP, "--out", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if line.startswith("warning: backend plugin")]
    assert len(warned) == 5 and "Traceback" not in r.stderr
    assert "warning: backend plugin clash = pluginfakes:CLASH (no distribution) left out: name 'torch' is taken" \
        in r.stderr
    rows = read_jsonl(tmp_path / "r" / "results.jsonl")
    assert {(x["backend"], x["backend_dist"], x["backend_version"], x["status"]) for x in rows} == {
        ("fake-good", "", "", "ok")}  # an entry point of no installed distribution


def test_doctor_lists_the_plugins_left_out_with_their_reasons_instead_of_warning(fakes):
    r = run_cli("doctor", "--json")
    info = json.loads(r.stdout)
    assert [x["name"] for x in info["plugins"]] == ["fake-good", "fake-one"]
    starts = {"gone = no_such_module_xyz:SPEC (no distribution)": "cannot be imported (ModuleNotFoundError",
              "clash = pluginfakes:CLASH (no distribution)": f"name 'torch' is taken by cpbench {cpbench.__version__}",
              "nofused = pluginfakes:NO_FUSED (no distribution)": "modes ('two-call',) must be a tuple holding two-call",
              "dict = pluginfakes:NOT_A_SPEC (no distribution)": "declares a dict, not a cpbench BackendSpec",
              "several = pluginfakes:SEVERAL (no distribution)": "name 'Fake Two' is not a backend name"}
    assert [x["plugin"] for x in info["left_out"]] == list(starts)
    assert all(x["reason"].startswith(starts[x["plugin"]]) for x in info["left_out"]), info["left_out"]
    assert "warning:" not in r.stderr and info["backends"]["fake-good"] is None


def test_a_class_named_by_module_and_class_runs_unregistered():
    spec = registry.get_spec("pluginfakes:PatternsAndModes")
    assert (spec.name, spec.kernel_patterns, spec.modes, spec.dist, spec.auto) == (
        "pluginfakes:PatternsAndModes", ("my_attention_kernel",), ("two-call", "fused", "cp-native"), "", False)
    assert registry.get_spec("cpbench.kernels.backends.torch_ref:TorchBackend").source_text == \
        f"cpbench {cpbench.__version__}"
    with pytest.raises(CpbenchInputError, match="breaks the backend protocol: it has no `prepare` method"):
        registry.get_backend("pluginfakes:NoPrepare")
    with pytest.raises(CpbenchInputError, match=r"cannot import no_such_module_xyz \(ModuleNotFoundError"):
        registry.get_spec("no_such_module_xyz:Backend")
    with pytest.raises(CpbenchInputError, match="module pluginfakes has no Missing: check the class name"):
        registry.get_spec("pluginfakes:Missing")
    r = run_cli("sweep", "--backend", "pluginfakes:", "--cp", "2")
    assert r.returncode == 2 and "is neither a backend name nor 'module:Class'" in r.stderr


@pytest.mark.slow
def test_the_example_plugin_installs_and_doctor_and_the_help_list_it(installed):
    spec = registry.backends()["example"]
    assert (spec.dist, spec.version, spec.origin, spec.impl) == (
        "cpbench-plugin-example", "0.1.0", "cpbench_plugin_example.specs:EXAMPLE",
        "cpbench_plugin_example.backend:SdpaBackend")
    r = run_cli("doctor", "--json")
    info = json.loads(r.stdout)
    assert info["plugins"] == [{"name": "example", "dist": "cpbench-plugin-example", "version": "0.1.0",
                                "declared": "cpbench_plugin_example.specs:EXAMPLE",
                                "impl": "cpbench_plugin_example.backend:SdpaBackend"}]
    assert info["left_out"] == [] and info["backends"]["example"] is None and r.stderr == ""
    table = run_cli("doctor", env={"COLUMNS": "200"}).stdout
    assert "plugin example" in table and "cpbench-plugin-example 0.1.0" in table
    columns = {c["name"]: c for c in json.loads(run_cli("columns", "--json").stdout)}
    assert columns["backend"]["unit"].split(" | ") == [*OWN, "example"]
    # --help is built once per process, when the CLI is imported: in a process of its own, as a user's
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(installed)]), "COLUMNS": "200"}
    help_text = subprocess.run([sys.executable, "-m", "cpbench", "sweep", "--help"], env=env, capture_output=True,
                               text=True, timeout=120, check=True).stdout
    assert "flex, example (auto:" in " ".join(help_text.split())


@pytest.mark.slow
def test_the_example_plugin_sweeps_on_the_cpu_and_its_rows_name_it(installed, tmp_path):
    out = tmp_path / "run"
    r = run_cli("sweep", "--backend", "example,torch,cpbench_plugin_example.backend:NoSinksBackend", *SWEEP,
                "--out", out)
    assert r.returncode == 1 and "4 row(s) failed the correctness check" in r.stdout  # the no-sinks twin's
    rows = read_jsonl(out / "results.jsonl")
    seen = {(x["backend"], x["backend_dist"], x["backend_version"], x["status"]) for x in rows}
    assert seen == {("example", "cpbench-plugin-example", "0.1.0", "ok"), ("torch", "cpbench", cpbench.__version__, "ok"),
                    ("cpbench_plugin_example.backend:NoSinksBackend", "cpbench-plugin-example", "0.1.0", "mismatch")}
    example = [x for x in rows if x["backend"] == "example"]
    assert len(example) == 4 and max(x["max_abs_err"] for x in example) <= 1e-4  # fp32's tolerance
    df, _ = RunDir(out).load()
    assert set(df.loc[df["backend"] == "example", "backend_dist"]) == {"cpbench-plugin-example"}
