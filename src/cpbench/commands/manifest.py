"""A sweep's manifest: what the sweep writes into ``manifest.json`` and how a ``--resume`` merges it.

The run directory (results/store.RunDir) reads and writes the file atomically and knows nothing of a
sweep's options; this module knows which config lists a resume may grow, what each invocation planned and
how wall times are recorded. ``manifest_version`` numbers this layout (absent: a manifest from before it;
readers fall back as ``report/run_report.missing_cells`` does).

Keys written here (besides the environment and ``config``): ``planned`` (each invocation's cell options),
``planned_cells`` (the cell keys the sweeps set out to measure: cp_size, bs, max_extend_len, batch, timing;
results/planned.py checks them on read),
``resumed_by``, ``timing_methods``, ``sweep_wall_s`` and ``sweep_phase_s`` (one entry per invocation).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cpbench.domain.cells import CellSpec
from cpbench.results.planned import PLANNED_CELL_KEYS
from cpbench.results.schema import SCHEMA_VERSION
from cpbench.results.store import RunDir

if TYPE_CHECKING:
    from cpbench.ranks.group import RankGroup
    from cpbench.commands.config import SweepConfig

MANIFEST_VERSION = 2  # 2: planned_cells (the report diffs keys instead of re-planning); 1 (absent): before
# config lists kept as the sorted union of every invocation's (a resume now refuses another grid, but an older
# cpbench's resumes could add cells to a run; commands/sweep.py compares these lists as sets)
GROWING = ("cp_sizes", "bs_list", "extend_len_list", "timings", "modes")
# what each invocation planned, kept per invocation in ``planned`` (the config's GROWING lists are unions: a
# --bs x --extend-len grid and a later --extend-lens batch would plan cells neither asked for)
PLANNED = ("cp_sizes", "timings", "bs_list", "extend_len_list", "extend_lens")


def config_dict(cfg: SweepConfig, group: RankGroup) -> dict:
    """The manifest's ``config``: every SweepConfig field (model as a dict) but the planned batches, the
    options the batches came from (``cells_from``: bs_list, extend_len_list, extend_lens, prefix, lengths, trace,
    prefix_hit, batches), plus launch and world_size. Lists as JSON lists."""
    fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in ("batches", "cells_from")}
    fields["backend"] = cfg.backend  # comma-joined, as manifests always held it (not the backends tuple)
    del fields["backends"]
    config = {k: (str(v) if k == "device" else dataclasses.asdict(v) if k == "model" else v) for k, v in fields.items()}
    config.update(dict(cfg.cells_from))
    config["launch"], config["world_size"] = group.launch, group.world_size
    return json.loads(json.dumps(config))


def planned_cells(cells: list[CellSpec], timings) -> list[dict]:
    """The keys of every (cell, timing) a sweep plans, in plan order: ``{cp_size, bs, max_extend_len, batch,
    timing}`` each (lengths in tokens)."""
    out = []
    for cell in cells:
        k = cell.key()
        out += [dict(zip(PLANNED_CELL_KEYS, (k.cp_size, k.bs, k.max_extend_len, k.batch, str(t)))) for t in timings]
    return out


@dataclass(frozen=True)
class SweepManifest:
    """What one sweep invocation records: ``env`` (environment, command, timing method), ``config``
    (:func:`config_dict`) and the ``cells`` it plans (:func:`planned_cells`)."""

    env: dict
    config: dict
    cells: list

    def fresh(self) -> dict:
        """The manifest of a new run directory."""
        manifest = {"schema_version": SCHEMA_VERSION, "manifest_version": MANIFEST_VERSION, **self.env,
                    "config": self.config, "planned": [self._plan()], "planned_cells": list(self.cells)}
        if "timing_method" in self.env:
            manifest["timing_methods"] = [self.env["timing_method"]]
        return manifest

    def merged_into(self, old: dict) -> dict:
        """The manifest after a ``--resume`` of the run whose manifest is ``old``: the first invocation's
        ``created`` and command are kept, this command is appended to ``resumed_by``, the config lists that may
        grow (:data:`GROWING`) become the union of old and new, ``planned`` gains this invocation's plan (an
        identical plan once) and ``planned_cells`` the cells it adds. ``timing_methods`` holds one entry per
        invocation (a manifest from before it: its ``timing_method``, then None for each later invocation).
        A manifest from before ``planned_cells`` keeps none (its readers re-plan from ``planned``)."""
        merged = {**old.get("config", {}), **self.config}
        for key in GROWING:
            a, b = old.get("config", {}).get(key), self.config.get(key)
            if isinstance(a, list) and isinstance(b, list):
                merged[key] = _union(a, b)
        planned = old.get("planned")
        if not isinstance(planned, list):  # a manifest from before the record: its config is what it planned
            planned = [{k: old.get("config", {}).get(k) for k in PLANNED}] if old.get("config") else []
        plan = self._plan()
        manifest = {**old, "config": merged, "resumed_by": [*old.get("resumed_by", []), self.env.get("command")],
                    "planned": planned + [plan] * (plan not in planned)}
        if isinstance(old.get("planned_cells"), list):
            have = {json.dumps(c, sort_keys=True) for c in old["planned_cells"]}
            manifest["planned_cells"] = old["planned_cells"] + [c for c in self.cells
                                                                if json.dumps(c, sort_keys=True) not in have]
        if "timing_method" in self.env:
            manifest["timing_methods"] = [*_earlier_timing_methods(old), self.env["timing_method"]]
        return manifest

    def write(self, run: RunDir) -> None:
        """Write it into ``run`` (merged into the manifest already there on a resume)."""
        old = run.read_manifest() if run.manifest_path.exists() else None
        run.write_manifest(self.fresh() if old is None else self.merged_into(old))

    def _plan(self) -> dict:
        return {k: self.config.get(k) for k in PLANNED}


def record_wall_time(run: RunDir, seconds: float, new_entry: bool = False, phases: dict | None = None) -> None:
    """Record this invocation's wall time so far (s) in ``sweep_wall_s``: one entry per invocation;
    ``new_entry`` starts it, later calls overwrite it (a killed sweep keeps the time it ran). ``phases``
    (s per harness phase, measure/walltime.py) goes to the same entry of ``sweep_phase_s``."""
    manifest = run.read_manifest()
    walls = list(manifest.get("sweep_wall_s", []))
    parts = list(manifest.get("sweep_phase_s", []))
    if new_entry or not walls:
        walls.append(0.0)
    walls[-1] = round(seconds, 1)
    manifest["sweep_wall_s"] = walls
    if phases is not None:
        parts = [p if isinstance(p, dict) else {} for p in parts[:len(walls)]]
        parts += [{}] * (len(walls) - len(parts))
        parts[len(walls) - 1] = phases
        manifest["sweep_phase_s"] = parts
    run.write_manifest(manifest)


def _earlier_timing_methods(old: dict) -> list:
    """The timing method of each invocation an existing manifest records (one per ``sweep_wall_s`` entry,
    at least one): its ``timing_methods``, else its ``timing_method`` then None for each later invocation."""
    runs = max(len(old.get("sweep_wall_s", [])), 1)
    methods = old.get("timing_methods") or [old.get("timing_method")]
    return (methods + [None] * runs)[:max(runs, len(methods))]


def _union(a: list, b: list) -> list:
    """Sorted union of two config lists (numbers numerically; mixed or odd values by their text)."""
    try:
        return sorted(set(a) | set(b))
    except TypeError:  # unhashable or mixed types in a hand-edited manifest
        return sorted({json.dumps(x): x for x in [*a, *b]}.values(), key=json.dumps)
