"""sweep --help in titled panels, a first run's options first (at most 15); any option from a TOML file
(--config) or --set name=value, the command line winning over --set, --set over the file (cli/panels.py)."""

import json
import re

import pytest

from clirun import cpbench
from cpbench.cli.panels import PANELS

TINY = ("--cp", "2", "--device", "cpu", "--layers", "2", "--no-profile", "--no-report", "--warmup", "0")


def _sections(text: str) -> dict[str, list[str]]:
    """Help section title -> the long option names listed in it, in order."""
    out: dict[str, list[str]] = {}
    title = None
    for line in text.split("Examples:")[0].splitlines():  # the epilog's examples are no section
        if line and not line.startswith(" "):  # a section's title, or the usage line or epilog (no section)
            title = line[:-1] if line.endswith(":") else None
            if title:
                out[title] = []
        elif title and re.match(r"\s{2}--", line):
            out[title].append(re.match(r"\s{2}(--[\w-]+)", line).group(1))
    return out


def test_sweep_help_opens_with_a_first_run_panel_and_lists_every_option_once():
    r = cpbench("sweep", "--help")
    assert r.returncode == 0
    sections = _sections(r.stdout)
    titles = list(sections)
    assert titles[0] == "First run" and titles[:len(PANELS["sweep"])] == [t for t, _ in PANELS["sweep"]]
    assert 10 <= len(sections["First run"]) <= 15
    assert sections["First run"][:3] == ["--cp", "--bs", "--extend-len"]
    listed = [o for opts in sections.values() for o in opts]
    assert len(listed) == len(set(listed))  # each option in one panel
    assert {"--forward-layers", "--budget-ms", "--swa-pool", "--dist-timeout", "--help"} <= set(listed)
    assert "--forward-layers" in sections["Breakable forward (--timing breakable)"]
    # what a first run does not need is in its own panel (a newcomer found --launch and --resume in the first)
    assert {"--launch", "--nproc-per-node"} <= set(sections["Real ranks (--launch torchrun)"])
    assert "--resume" in sections["Checks, output, resuming"]


@pytest.mark.slow
def test_a_toml_config_and_set_give_the_run_the_flags_give(tmp_path, rough_charts):
    cfg = tmp_path / "sweep.toml"
    cfg.write_text('bs = [1]\nextend-len = [32]\ntiming = "eager"\nbudget_ms = 4\nrel-ci = 0.2\n')
    flags = cpbench("sweep", *TINY, "--bs", "1", "--extend-len", "32", "--timing", "eager", "--budget-ms", "4",
                    "--rel-ci", "0.2", "--out", tmp_path / "flags")
    from_file = cpbench("sweep", *TINY, "--config", cfg, "--out", tmp_path / "file")
    assert flags.returncode == from_file.returncode == 0, from_file.stderr
    config = {d: json.loads((tmp_path / d / "manifest.json").read_text())["config"] for d in ("flags", "file")}
    assert config["file"] == config["flags"] and config["file"]["budget_ms"] == 4.0
    # the command line wins over --set, which wins over the file
    r = cpbench("sweep", *TINY, "--config", cfg, "--set", "budget-ms=3", "--set", "rel_ci=0.3", "--rel-ci", "0.25",
                "--out", tmp_path / "both")
    assert r.returncode == 0, r.stderr
    both = json.loads((tmp_path / "both" / "manifest.json").read_text())["config"]
    assert (both["budget_ms"], both["rel_ci"], both["timings"]) == (3.0, 0.25, ["eager"])


@pytest.mark.parametrize("args, message", [
    (("--set", "budgetms=3"), "'budgetms' is not an option of cpbench sweep (did you mean budget-ms?)"),
    (("--set", "budget-ms"), "--set budget-ms: write name=value"),
    (("--config", "missing.toml"), "--config missing.toml: cannot read it"),
    (("--config", "bad.toml"), "--config bad.toml: not TOML"),
    (("--config", "table.toml"), "--config table.toml: timing is a table"),
    (("--set", "config=x.toml"), "'config' is not an option of cpbench sweep"),
])
def test_a_bad_config_or_set_is_one_line_and_exit_2(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.toml").write_text("bs = [1,\n")
    (tmp_path / "table.toml").write_text("[timing]\nx = 1\n")
    r = cpbench("sweep", *TINY, *args, "--out", tmp_path / "run")
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "run").exists()
