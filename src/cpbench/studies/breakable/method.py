"""The breakable timing as the core runs it (:mod:`cpbench.measure.method`): :class:`BreakableTiming` builds a
cell's rest of the layer once (:func:`~cpbench.studies.breakable.rest.build_layer_rest`); its
:class:`BreakableMethod` turns each rank's prepared forwards into breakable layers and times them, whole
(``--forward-layers all``, and always with real ranks) or one layer of each kind (``kinds``, the default)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

from cpbench.domain.modes import Timing
from cpbench.kernels import check as checks
from cpbench.kernels.backends.base import Prepared
from cpbench.kernels.workload import RankWork
from cpbench.measure.method import Fn, Unavailable
from cpbench.measure.rank import DTYPES, RankJob, attempt, prefixed
from cpbench.ranks.group import OK_PAIR, RankGroup, StatusPair
from cpbench.studies.breakable.layers import breakable_layers, kind_rotation, layer_kind_us, run_layers, \
    time_layer_kinds
from cpbench.studies.breakable.rest import CellRest, build_layer_rest
from cpbench.studies.breakable.stream import time_stream

@dataclass
class BreakableMethod:
    """One cell's breakable timing (:class:`cpbench.measure.method.TimingMethod`).

    Attributes:
        rest: the cell's rest-of-layer work and its captured segments.
        forward_layers: ``kinds`` (one layer of each kind, :func:`time_layer_kinds`) or ``all`` (whole forwards).
        check_kinds: ``all`` on simulated ranks: after the whole forwards, estimate the same forward from one layer
            of each kind too (``kinds_forward_us``), at the clock and temperature the whole forwards left.
    """

    rest: CellRest
    forward_layers: str
    check_kinds: bool = False
    timing: str = Timing.BREAKABLE
    keeps_first_outputs: bool = True
    keeps_host_samples: bool = True

    def __post_init__(self) -> None:
        self._layers: dict[str, list[list[Fn]]] = {}  # mode -> per-layer callables of the rank being timed

    @property
    def extra_flops(self) -> float:
        return self.rest.columns.get("rest_flops", 0.0)

    @property
    def columns_always(self) -> dict:
        return dict(self.rest.columns)

    def callables(self, job: RankJob, work: RankWork, prepared: dict[str, Prepared], modes: list[str],
                  group: RankGroup) -> tuple[dict[str, Fn], dict[str, StatusPair]]:
        """Per mode, one breakable forward (:func:`breakable_layers`; ``kinds`` captures only the layers its samples
        run), and the status of the modes whose segment capture failed on any rank."""
        fns, status = {}, {}
        self._layers = {}
        only = None
        if self.forward_layers == "kinds":
            only = [i for idx in kind_rotation(work.model.window_left_per_layer).values() for i in idx]
        for m in modes:
            holder: dict = {}
            st = attempt(lambda: holder.update(layers=breakable_layers(prepared[m], self.rest, only)), job.tracebacks)
            st = group.agree_status(prefixed(st, "breakable segment capture failed", job.tracebacks))
            if st != OK_PAIR:
                status[m] = st
                continue
            layers = holder["layers"]
            fns[m] = lambda layers=layers: run_layers(layers)
            self._layers[m] = layers
        return fns, status

    def samples(self, job: RankJob, work: RankWork, fns: dict[str, Fn],
                timer: Callable[[dict, dict], dict]) -> tuple[dict, dict, dict]:
        """``all``: whole forwards through the core's interleaved timer (with :attr:`check_kinds`, then the one-layer
        estimate's median as ``kinds_forward_us``); ``kinds``: the forward estimated from one layer of each kind, its
        layers back to back (:func:`time_stream`), the ``forward_rule`` and kind columns with the samples."""
        if self.forward_layers != "kinds":
            stop: dict = {}
            whole = timer(fns, stop)
            checked = {m: {"kinds_forward_us": statistics.median(e.forward_us)}
                       for m, e in self._estimate(job, work, fns, {}).items()} if self.check_kinds else {}
            return whole, stop, checked
        est = self._estimate(job, work, fns, {})
        return ({m: e.forward_us for m, e in est.items()}, {m: e.stop for m, e in est.items()},
                {m: e.columns for m, e in est.items()})

    def _estimate(self, job: RankJob, work: RankWork, fns: dict[str, Fn], info: dict) -> dict:
        """:func:`time_layer_kinds` of the modes in ``fns``, each kind's layers back to back (:func:`time_stream`)."""
        t = job.timing
        rel_ci = t.rel_ci

        def layer_timer(variants: dict, info: dict, budget_share: float, forward_ci: Callable) -> dict:
            return time_stream(variants, job.clock, warmup=t.warmup, budget_ms=t.pass_budget_ms * budget_share,
                               min_reps=t.min_reps(job.clock.cuda), min_stop=t.min_stop, rel_ci=rel_ci, info=info,
                               times=job.times, precise=lambda s: forward_ci(s) <= rel_ci if rel_ci else False)

        return time_layer_kinds({m: self._layers[m] for m in fns}, job.clock, work.model.window_left_per_layer,
                                layer_timer, info)

    def columns(self, job: RankJob, work: RankWork, mode: str, measured: dict, first_outputs: dict | None,
                prepared: Prepared, group: RankGroup) -> dict:
        """The kind split (measured with the samples, or ``all``: its own per-layer pass), the rest's columns and,
        in pass 1 with the check on, ``diff_vs_eager`` against the first forward's outputs."""
        split = measured if "forward_rule" in measured else {
            **layer_kind_us(self._layers[mode], job.clock, work.model.window_left_per_layer, barrier=group.barrier),
            "forward_rule": "all", **measured}
        diff = {"diff_vs_eager": checks.max_diff_outputs(prepared.local_outputs(), first_outputs)} \
            if first_outputs else {}
        return {**split, **self.rest.columns, **diff}

    def release(self) -> None:
        self._layers = {}
        self.rest.release()


@dataclass(frozen=True)
class BreakableTiming:
    """The breakable timing's factory (:class:`cpbench.measure.method.TimingFactory`): a cell's rest of the layer,
    from the sweep's ``model``, ``tp_size``, ``ep``, ``layer_rest_us``, ``graph_buckets`` and ``forward_layers``
    (real ranks time whole forwards: each sample's maximum over ranks is the critical path; ``all`` on simulated ranks
    also times the one-layer estimate after the whole forwards, ``kinds_forward_us``)."""

    timing: str = Timing.BREAKABLE
    phase: str = "rest"

    def for_cell(self, cfg: Any, cell: Any, tokens_padded: int, group: RankGroup) -> BreakableMethod:
        """Raises Unavailable (``skipped``: it would not fit; ``oom``), CpbenchInputError (the model lacks a field
        its layer needs)."""
        rest = build_layer_rest(cfg.model, tokens_padded, cell.cp_size, tp_size=cfg.tp_size, ep=cfg.ep,
                                layer_rest_us=cfg.layer_rest_us, buckets=cfg.graph_buckets, device=cfg.device,
                                dtype=DTYPES[cfg.dtype], seed=cfg.seed, a2a=group.all_to_all())
        simulated = group.launch == "simulated"
        rule = cfg.forward_layers if simulated else "all"
        return BreakableMethod(rest, rule, check_kinds=simulated and rule == "all")


TIMING = BreakableTiming()

__all__ = ["BreakableMethod", "BreakableTiming", "TIMING", "Unavailable"]
