"""cpbench command line: the typer app and its commands, wired from the modules beside this one.

Each command is a plain function in its own module (geometry: geometry, models, columns; sweep: sweep;
profile: profile; explain: explain; doctor: doctor; check_backend: check-backend; report: plot, report, compare); options shared by
several commands live in options, the cell options of sweep and profile in cells, and how errors end the
process (one line on stderr, exit codes) in errors. Logic lives in the layers below: run/ and report/.

Exit codes: 0 ok; 1 a measured problem (mismatch, regression); 2 bad input (one line on stderr); 130 Ctrl-C.
"""

from __future__ import annotations

import os
import re
import sys

import typer
from typer.core import TyperArgument, TyperCommand

from cpbench.cli.options import refuse_repeated
from cpbench.cli import (check_backend as cli_check_backend, doctor as cli_doctor, errors as cli_errors,
                         explain as cli_explain, geometry as cli_geometry, profile as cli_profile,
                         report as cli_report, sweep as cli_sweep)

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # keep torch.profiler's per-step log lines off the terminal

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # click's plain help: it wraps long descriptions and option names instead of cutting them with "…" in
    # a narrow or piped terminal, and shows flags (--resume, --check/--no-check) without a "<bool>" value
    rich_markup_mode=None,
    context_settings={"max_content_width": 120},
    help="Benchmark and profile zigzag context-parallel prefill attention: fused (SGLang PR #33137) "
         "vs two-call, per rank, on real kernels.",
    epilog="Examples:  cpbench sweep --cp 4 --bs 1,4,16   |   cpbench geometry --cp 4 --extend-lens 11,13 "
           "--prefix-lens 8,14   |   cpbench profile --cp 4 --bs 1 --extend-len 8192   |   cpbench report runs/<id>",
)

# (command function, epilog with examples), in the order `cpbench --help` lists them; the function's name
# is the command's, its docstring the help.
COMMANDS = (
    (cli_geometry.geometry, cli_geometry.GEOMETRY_EPILOG),
    (cli_geometry.models, cli_geometry.MODELS_EPILOG),
    (cli_geometry.columns, cli_geometry.COLUMNS_EPILOG),
    (cli_sweep.sweep, cli_sweep.SWEEP_EPILOG),
    (cli_profile.profile, cli_profile.PROFILE_EPILOG),
    (cli_explain.explain, cli_explain.EXPLAIN_EPILOG),
    (cli_doctor.doctor, cli_doctor.DOCTOR_EPILOG),
    (cli_check_backend.check_backend, cli_check_backend.CHECK_BACKEND_EPILOG),
    (cli_report.plot, cli_report.PLOT_EPILOG),
    (cli_report.report, cli_report.REPORT_EPILOG),
    (cli_report.compare, cli_report.COMPARE_EPILOG),
)
def short_help(doc: str | None) -> str:
    """A command's line in ``cpbench --help``: the first sentence of its docstring, whole (click would cut
    it with "..." at the terminal's width)."""
    text = " ".join((doc or "").split())
    return re.split(r"(?<=\.)\s+(?=[A-Z])", text)[0] if text else ""


class Command(TyperCommand):
    """A cpbench command whose usage line names its arguments as click does (``cpbench report [OPTIONS]
    RUN``): typer writes a required argument in braces (``{RUN}``), which reads like a placeholder left
    unformatted. It refuses an option that takes one value given twice (options.refuse_repeated) before
    click parses the arguments (click would keep the last value)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if not any(a in ctx.help_option_names for a in args):  # --help shows the help whatever else is given
            refuse_repeated(self.get_params(ctx), args, self.name)
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.metavar or param.name.upper()
                name = name if param.required else f"[{name}]"
                pieces.append(name + ("..." if param.nargs != 1 else ""))
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


for command, epilog in COMMANDS:
    app.command(cls=Command, epilog=epilog, short_help=short_help(command.__doc__))(command)


def main() -> None:
    """Run the app on sys.argv and exit with its code; errors end as cli_errors.RULES say (in-process
    callers, e.g. the tests; the ``cpbench`` command is :func:`entry`)."""
    sys.exit(cli_errors.run(app))


def entry() -> None:
    """The ``cpbench`` command and ``python -m cpbench``: :func:`main`, except that after Ctrl-C (exit code
    130, its message printed, every row already on disk and the run directory unlocked) the process ends
    without the interpreter's teardown. An interrupt can land inside torch.profiler's Python code, leaving
    its native callbacks half removed ("Requested callback is not found"), and their destructors then
    crashed the process at exit (SIGSEGV) in about one Ctrl-C in 30.

    A process started with stdout or stderr closed (``cpbench geometry >&-``: Python sets it to None) writes
    that stream to os.devnull instead of failing at its first write; the command runs as usual."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))
    code = cli_errors.run(app)
    if code == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    sys.exit(code)
