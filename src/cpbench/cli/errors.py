"""How the CLI ends: one table from exception to one-line message and exit code, used by ``cli.main``.

Exit codes: 0 ok; 1 a measured problem (mismatch, regression); 2 bad input (one line on stderr);
130 interrupted. ``CPBENCH_DEBUG=1`` re-raises instead, so the full traceback is printed.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Callable, NamedTuple, Optional

from rich.markup import escape

from cpbench.cli.options import degrade_console, err_console, silence
from cpbench.errors import CpbenchInputError, CpbenchWarning, one_line

# Ctrl-C of a command that says nothing more itself: a sweep says where its rows are and how to resume
# (SweepInterrupted, cli/sweep.py), a torchrun launch that it was stopped (LaunchInterrupted)
INTERRUPTED = "interrupted"


# An option of another command given to this one: what this command takes instead (click's "Possible options"
# suggestion is only the nearest spelling)
OPTION_HINTS = {
    ("geometry", "--bs"): "geometry reads one batch: give one extend length per request with --extend-lens "
                          "(e.g. --extend-lens 8192,8192,8192,8192 for bs 4)",
    ("geometry", "--extend-len"): "geometry reads one batch: give one extend length per request with --extend-lens",
}


def _usage(e: BaseException) -> str:  # unknown option/command, bad value, missing argument
    ctx = getattr(e, "ctx", None)
    hint = OPTION_HINTS.get((getattr(ctx, "info_name", None), getattr(e, "option_name", None)))
    if hint is not None:
        return f"no such option: {e.option_name}: {hint}"
    return e.format_message() + (f" (see '{ctx.command_path} --help')" if ctx is not None else "")


def _help(e: BaseException) -> str:
    return str(e)  # click builds it with ctx.get_help(), which typer's rich help prints already (returning "")


class Rule(NamedTuple):
    """Exceptions of these types (classes, or click class names: typer may vendor click) print
    ``message(e)`` on ``stream`` and exit with ``code``; ``error`` prefixes the message with ``error:``."""

    types: tuple
    message: Callable[[BaseException], str]
    code: int | Callable[[BaseException], int]  # an exit code, or how to read it from the exception
    error: bool = True
    stream: str = "stderr"
    debug_raises: bool = True  # CPBENCH_DEBUG=1 re-raises it


# First match wins (CpbenchInputError is a ValueError; NoArgsIsHelpError is a UsageError).
RULES: tuple[Rule, ...] = (
    Rule((CpbenchInputError,), str, 2),
    Rule((OverflowError, MemoryError),  # a size no machine can hold (e.g. --window 1e20)
         lambda e: f"a value is too large to run ({one_line(e)}): use realistic sizes", 2),
    Rule((OSError, UnicodeDecodeError),  # a path that is not what it should be (file vs folder, ...)
         lambda e: f"{type(e).__name__}: {e}: check that path (a file where a folder belongs or the reverse, "
                   "permissions, free space)", 2),
    Rule(("NoArgsIsHelpError",), _help, 0, error=False, stream="stdout", debug_raises=False),
    Rule(("UsageError",), _usage, 2),
    Rule(("Abort",), lambda e: "aborted", 130, error=False),
    Rule((KeyboardInterrupt,), lambda e: INTERRUPTED, 130, error=False, debug_raises=False),
    # Ctrl-C / SIGTERM of a torchrun launch: its own line (the launch was stopped), not a second one
    Rule(("LaunchInterrupted",), str, lambda e: getattr(e, "code", 130), error=False, debug_raises=False),
    # Ctrl-C of a sweep that has a run directory: where its rows are and the command that finishes it
    Rule(("SweepInterrupted",), str, 130, error=False, debug_raises=False),
)


def _matches(e: BaseException, types: tuple) -> bool:
    names = {c.__name__ for c in type(e).__mro__}
    return any(t in names if isinstance(t, str) else isinstance(e, t) for t in types)


def rule_for(e: BaseException) -> Optional[Rule]:
    """The first rule of RULES that ``e`` matches, or None (an unexpected error: let it raise)."""
    return next((r for r in RULES if _matches(e, r.types)), None)


def report(rule: Rule, e: BaseException) -> int:
    """Print ``rule``'s message for ``e``; return its exit code."""
    text = rule.message(e)
    code = rule.code(e) if callable(rule.code) else rule.code
    if os.environ.get("RANK", "0") != "0" and "WORLD_SIZE" in os.environ:
        return code  # one of several ranks of a launch: rank 0 says it once
    if rule.stream == "stdout":
        if text:
            print(text)
    elif rule.error:
        err_console.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)
    else:
        err_console.print(escape(text), highlight=False, soft_wrap=True)
    return code


def debug() -> bool:
    return os.environ.get("CPBENCH_DEBUG", "").strip() not in ("", "0")


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """cpbench's own warnings as one ``warning:`` line; others as Python prints them."""
    if issubclass(category, CpbenchWarning):
        err_console.print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def run(app: Callable[..., object]) -> int:
    """Run the typer ``app`` on ``sys.argv``; return the exit code, printing the one-line message of RULES
    for a known exception (or re-raising it under ``CPBENCH_DEBUG=1``)."""
    degrade_console()
    shown = warnings.showwarning
    warnings.showwarning = show_warning
    try:
        code = app(standalone_mode=False)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader of stdout left (`| head -1`) after the work was done: not an error
        silence(sys.stdout)
        return 0
    except (Exception, KeyboardInterrupt) as e:  # KeyboardInterrupt outside a command; typer turns one
        rule = rule_for(e)                       # inside a command into exit code 130
        if rule is None or (rule.debug_raises and debug()):
            raise
        return report(rule, e)
    finally:
        warnings.showwarning = shown
    if code == 130:  # Ctrl-C inside a command (typer returns it as exit code 130)
        return report(rule_for(KeyboardInterrupt()), KeyboardInterrupt())
    return code if isinstance(code, int) else 0

