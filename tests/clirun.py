"""Run the cpbench CLI in this process, as ``cpbench ARGS`` would run: ``cpbench.cli.app.main`` on ``sys.argv``,
so errors go through the same exception table (cli/errors.py) and exit codes as the installed command. The
click command typer builds from the app is built once per process (:func:`command`), not on every call as
the app does (about 25 ms for cpbench's options, and each option's value adapter again when first parsed).

About 100x faster than ``python -m cpbench`` in a subprocess. Use a subprocess only where a real process
matters (signals, a killed sweep, a missing torch). Process state the CLI touches is put back afterwards:
sys.argv, environment variables (``env``), torch's intra-op thread count, warnings.showwarning, and the
``__main__`` module (click names the program from it: under ``python -m pytest`` without xdist workers it
would read ``python -m pytest``; the installed ``cpbench`` script has a ``__main__`` without a package).
"""

from __future__ import annotations

import functools
import sys
import types
import warnings
from dataclasses import dataclass
from typing import Mapping, Optional

from click.testing import CliRunner


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@functools.cache
def command():
    """The click command of ``cpbench.cli.app.app``, as its ``app(...)`` builds it (``typer.main.get_command``)."""
    import typer.main

    from cpbench.cli.app import app

    return typer.main.get_command(app)


def main() -> None:
    """``cpbench.cli.app.main`` on the command built once: the same error table and exit codes."""
    from cpbench.cli import errors as cli_errors

    sys.exit(cli_errors.run(command()))


def cpbench(*args, env: Optional[Mapping[str, Optional[str]]] = None) -> Result:
    """``cpbench *args`` in-process: exit code and captured stdout / stderr (like subprocess.run's)."""

    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    argv, shown, main_module = sys.argv, warnings.showwarning, sys.modules["__main__"]
    sys.argv = ["cpbench", *map(str, args)]
    sys.modules["__main__"] = types.ModuleType("__main__")  # as in the console script: click reads "cpbench"
    try:
        with CliRunner().isolation(env=env) as (out, err, _):
            try:
                main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            sys.stdout.flush()
            sys.stderr.flush()
            return Result(code, out.getvalue().decode(), err.getvalue().decode())
    finally:
        sys.argv, warnings.showwarning, sys.modules["__main__"] = argv, shown, main_module
        if threads is not None:
            torch.set_num_threads(threads)


def as_from_a_terminal() -> None:
    """``preexec_fn`` of a child a test sends SIGINT: SIGINT as a terminal gives it (default disposition). A
    test run from a background job (``pytest ... &``) inherits SIGINT ignored, and Python then installs no
    KeyboardInterrupt handler: the signal would do nothing."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def replacing(args, *options) -> list:
    """``args`` with each ``--name value`` pair of ``options`` in place of that option there (removed where it
    was, then appended): cpbench refuses an option given twice, so a test varies a base command this way."""
    names = set(options[::2])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in names:
            skip = True
        else:
            out.append(a)
    return [*out, *options]
