"""``cpbench doctor``: the GPU, drivers, libraries, JIT cache, nsys, and which backends can run here."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from cpbench.cli.options import console
from cpbench.domain.jsonfile import dumps

DOCTOR_EPILOG = "Examples:  cpbench doctor  |  cpbench doctor --json"


def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print {environment, backends, plugins, left_out} as "
                                                         "JSON (a backend maps to null or why it cannot run).")] = False,
) -> None:
    """Show the GPU, drivers, library versions, JIT cache, nsys, which backends can run here, the backend plugins
    found and those left out (with why). Exits 0 even when things are missing."""
    from cpbench.commands.doctor import diagnose

    info = diagnose()
    if as_json:
        print(dumps(info))
        return
    t = Table(title="cpbench doctor", show_header=False)
    t.add_column("what")
    t.add_column("value")
    for k, v in info["environment"].items():
        t.add_row(k, "-" if v in (None, "") else escape(str(v)))
    for b, why in info["backends"].items():
        t.add_row(f"backend {b}", "[green]available[/]" if why is None else f"[yellow]unavailable:[/] {escape(why)}")
    for p in info["plugins"]:
        t.add_row(f"plugin {p['name']}", escape(f"{p['dist']} {p['version']} ({p['declared']}; class {p['impl']})"))
    for lo in info["left_out"]:
        t.add_row("plugin left out", f"[red]{escape(lo['plugin'])}:[/] {escape(lo['reason'])}")
    if not info["plugins"] and not info["left_out"]:
        t.add_row("plugins", "none installed (entry point group cpbench.backends; docs/backends.md)")
    console.print(t)
