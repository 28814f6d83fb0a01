"""``cpbench plot | report | compare``: read run directories, never a GPU (no torch import).

Errors are CpbenchInputError (one line, exit 2, printed by cli.main); a regression in ``compare`` exits 1.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from cpbench.cli.options import err_console
from cpbench.errors import CpbenchInputError
from cpbench.results.verdicts import MIN_SAMPLES

RunArg = Annotated[Path, typer.Argument(help="Run directory written by `cpbench sweep` (holds results.*).",
                                        show_default=False, metavar="RUN")]
PLOT_EPILOG = "Example:  cpbench plot runs/<id>"
REPORT_EPILOG = "Example:  cpbench report runs/<id>   (torchrun run vs its simulated twin: --simulated runs/<sim-id>)"
COMPARE_EPILOG = "Example:  cpbench compare runs/base runs/new --fail-above 0.05 --out compare.md"


@contextmanager
def readable(*runs: Path):
    """Turn a failure on values cpbench never writes (a hand-edited or corrupt row or manifest) into one
    CpbenchInputError line naming the run(s)."""
    try:
        yield
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
        if isinstance(e, CpbenchInputError):
            raise
        names = " / ".join(repr(str(r)) for r in runs)
        raise CpbenchInputError(f"{names} holds values cpbench cannot read ({type(e).__name__}: "
                                f"{' '.join(str(e).split())[:120]}): restore the files or re-run the sweep") from None


def warn_if_writing(what: str, *runs: Path) -> None:
    """One ``warning:`` line on stderr per run directory a sweep still holds (``RunDir.writer``): ``what`` (the
    report covers, the charts cover, ...) says it holds only the rows written so far."""
    from cpbench.results.store import RunDir

    for run in runs:
        holder = RunDir(run).writer()
        if holder is not None:
            text = (f"{run} is still being written by a sweep ({holder}): {what} the rows measured so far; "
                    "run it again when the sweep ends")
            err_console.print(f"[yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True)


def latest_run(run: Path) -> Path:
    """``run`` itself, or for a directory of runs (``runs/``) its latest run, with a note on stderr that
    lists the others."""
    from cpbench.results.store import RunDir

    inside = RunDir(run).runs_inside()
    if not inside:
        return run
    latest = inside[-1].path
    others = ", ".join(r.path.name for r in reversed(inside[:-1][-5:]))
    more = f" and {len(inside) - 6} more" if len(inside) > 6 else ""
    which = (f"using the latest, {latest} (others, newest first: {others}{more}; name one to use it)" if others
             else f"using it, {latest}")
    err_console.print(escape(f"note: {run} holds {len(inside)} run{'s' if len(inside) != 1 else ''}, not results "
                             f"of its own: {which}"), highlight=False, soft_wrap=True)
    return latest


def plot(run: RunArg) -> None:
    """Draw every chart of a run into RUN/plots/ (PNG + SVG); for a directory of runs, of its latest run."""
    from cpbench.studies import study_reports
    from cpbench.report.charts import render_all

    run = latest_run(run)
    warn_if_writing("the charts cover", run)
    with readable(run):
        paths = render_all(run, studies=study_reports(), workers=None)
    pngs = [p for p in paths if p.suffix == ".png"]
    typer.echo(f"wrote {len(pngs)} charts (PNG + SVG) to {run / 'plots'}")


def report(
    run: RunArg,
    replot: Annotated[bool, typer.Option(help="Redraw the charts even if they exist.")] = False,
    simulated: Annotated[Optional[Path], typer.Option(
        help="A simulated run (same cells, no --launch) to compare this torchrun run's critical path with: "
             "adds a 'Simulated vs real' table and chart.", show_default=False)] = None,
) -> None:
    """Write RUN/report.md, ready to paste into a PR (RUN may be a directory of runs: its latest run).

    Summary, environment, repro command, tables per cp size, kernel counts, charts (drawn if missing), notes;
    for a torchrun run also a "Real CP (torchrun)" section (phases, gather share, link-bandwidth estimate).
    """
    from cpbench.studies import study_reports
    from cpbench.report.run_report import write_report

    run = latest_run(run)
    warn_if_writing("the report covers", run, *([simulated] if simulated is not None else []))
    with readable(run, *([simulated] if simulated is not None else [])):
        path = write_report(run, replot=replot, simulated=simulated, studies=study_reports(),
                                chart_workers=None)
    typer.echo(f"wrote {path}")


def compare(
    base: Annotated[Path, typer.Argument(help="Baseline run directory.", show_default=False, metavar="BASE")],
    new: Annotated[Path, typer.Argument(help="New run directory.", show_default=False, metavar="NEW")],
    fail_above: Annotated[float, typer.Option(
        help="Exit 1 if some row's new run costs more than this fraction of the base time (new/base > 1 + this), "
             "with its 95% CI entirely on that side.")] = 0.05,
    out: Annotated[Optional[Path], typer.Option(help="Also write the markdown to this file.")] = None,
    seed: Annotated[int, typer.Option(help="Bootstrap seed (results are reproducible for a seed).")] = 0,
    min_samples: Annotated[int, typer.Option(
        help="Timed samples both rows need before a slowdown can fail the run (raise --budget-ms to get more).")] = MIN_SAMPLES,
    allow_missing: Annotated[bool, typer.Option(
        "--allow-missing", help="Rows ok in BASE that NEW did not measure (not ok, or absent) do not fail the gate.")
    ] = False,
) -> None:
    """Compare two runs: per cell, rank and mode the share of the base time the new run saves (+) or costs (−), and
    both runs' fused-vs-two-call effects (the share of the two-call time fused saves), each with its 95% CI.

    Rows match on the results key (model, backend, dtype, launch, world_size, gather, timing, cp, bs, seq,
    prefix, extend lengths, rank, mode) and are compared when both ran.

    Effect = 1 − new/base median, 95% CI by bootstrap of the raw samples; tie: the CI contains 0 (the rule and the
    notation of the report, +0.7 % [+0.1, +1.4]). Per cell, the two runs' speedup verdicts (faster / slower / tie
    by interval) and whether they agree (GPU runs: a CPU run makes no speedup claim).

    Prints markdown. Exit 1 (the gate fails, with a reason line on stderr) if a row with >= --min-samples
    samples costs more than --fail-above of the base time with its CI all below 0, or a row ok in BASE is not ok or missing
    in NEW (unless --allow-missing); else 0; 2: bad input. The CI covers noise within each run, not between
    runs: gate on a quiet GPU. Either run on a CPU: a functional check, so only the lost rows gate (no latency).
    """
    from cpbench.results.compare import MISSING, compare_runs, run_difference
    from cpbench.results.store import RunDir
    from cpbench.report.compare_md import compare_markdown

    if not 0 <= seed < 2**32:
        raise CpbenchInputError(f"--seed must be in [0, 2**32), got {seed}")
    if out is not None:
        if out.is_dir():
            raise CpbenchInputError(f"--out {str(out)!r} is a directory: give a file path such as compare.md")
        real = out.resolve()  # through symlinks
        if real.name in RunDir.FILES or RunDir(real.parent).is_run_dir():
            raise CpbenchInputError(f"--out {str(out)!r} would write into a run directory ({real.parent}): "
                                    "give a path outside it, such as compare.md")
        if not real.parent.is_dir() or not os.access(real.parent, os.W_OK):  # found now, not after printing
            raise CpbenchInputError(f"cannot write --out {str(out)!r}: {real.parent} is not a writable directory; "
                                    "pick a writable path")
    for name, run in (("BASE", base), ("NEW", new)):  # never guess which run of runs/ was meant here
        inside = RunDir(run).runs_inside()
        if inside:
            many = f"{len(inside)} runs, not one" if len(inside) > 1 else "1 run, not results of its own"
            raise CpbenchInputError(f"{name} {str(run)!r} holds {many}: pass one run directory such as "
                                    f"{inside[-1].path} (the latest)")
    once = {}
    for r in (base, new):  # one run under two spellings (run, ./run/) warns once
        once.setdefault(Path(r).resolve(), r)
    warn_if_writing("the comparison covers", *once.values())
    with readable(base, new):
        res, bman, nman = compare_runs(base, new, fail_above=fail_above, seed=seed, min_samples=min_samples,
                                       allow_missing=allow_missing)
        text = compare_markdown(res, str(base), str(new), bman, nman)
    measured_lost = res.lost is not None and bool((res.lost["new_status"] != MISSING).any())
    if res.table.empty and (allow_missing or not measured_lost):  # a gate must not pass on an empty comparison
        if len(res.not_comparable):  # the runs hold the same rows, and none of them ran in both
            why = ", ".join(f"{n} {s} in base" for s, n in res.not_comparable["base_status"].value_counts().items())
            raise CpbenchInputError(f"no row ran (status ok) in both runs, so nothing was compared ({why}): "
                                    "compare runs whose cells ran")
        raise CpbenchInputError(f"no row ran (status ok) in both runs, so nothing was compared "
                                f"({run_difference(res.only_base, res.only_new)}): compare runs of the same "
                                "model, backend, dtype, launch and cells")
    typer.echo(text, nl=False)
    if out is not None:
        try:
            out.write_text(text, encoding="utf-8")
        except OSError as e:
            raise CpbenchInputError(f"cannot write --out {str(out)!r}: {e.strerror}; pick a writable path") from None
    reasons = res.gate_reasons()
    if reasons:  # on a CPU run only lost rows: its latencies are not gated
        typer.echo("compare: gate failed: " + "; ".join(reasons), err=True)
    raise typer.Exit(res.exit_code)
