"""``cpbench check-backend NAME``: the conformance run of one backend (commands/check_backend.py), as a verdict table.

Exit codes: 0 every part passed (or was skipped where it cannot run), 1 a part failed, 2 bad input.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cpbench.cli.options import DeviceOpt, DType, console, resolve_device
from cpbench.cli.tables import Col, print_table
from cpbench.domain.jsonfile import dumps

CHECK_BACKEND_EPILOG = ("Examples:  cpbench check-backend torch  |  cpbench check-backend example --json  |  "
                        "cpbench check-backend my_pkg.backend:MyBackend --device cuda")


def check_backend(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A backend name (`cpbench doctor` lists them) or "
                                                             "pkg.module:ClassName of a class not registered.",
                                        show_default=False)],
    device: DeviceOpt = None,
    dtype: Annotated[DType, typer.Option("--dtype", help="q/k/v dtype of the check cells.")] = DType.bf16,
    budget_ms: Annotated[float, typer.Option("--budget-ms", help="Timing budget per cell and mode, ms.")] = 20.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print {backend, device, dtype, verdicts, hints, passed} "
                                                         "as JSON.")] = False,
) -> None:
    """Check a backend as its author would before a sweep: its declaration, class and protocol, outputs against
    the fp32 reference on small cells (plain causal, prefix, sinks, window, SWA pool, cp 4), fused against
    two-call, its kernel patterns (CUDA), eager and graph timing (graph on CUDA). Exit 0 pass, 1 fail, 2 bad
    input (docs/backends.md)."""
    from cpbench.errors import CpbenchInputError
    from cpbench.commands.check_backend import FAIL, PASS, check_backend as run_check

    if not budget_ms > 0:
        raise CpbenchInputError(f"--budget-ms must be > 0, got {budget_ms:g}")
    report = run_check(name.strip(), resolve_device(device), dtype.value, budget_ms)
    if as_json:
        print(dumps(report.as_json()))
        raise typer.Exit(report.exit_code)
    rows = [[v.part, v.result.upper() if v.result == FAIL else v.result, v.detail] for v in report.verdicts]
    print_table(console, f"check-backend {report.backend} on {report.device}, {report.dtype}",
                [Col("part", left=True), Col("result", left=True),
                 Col("detail", number=False, left=True)], rows)
    for hint in report.hints:
        console.print(f"look at: {hint}", soft_wrap=True, markup=False, highlight=False)
    failed = [v.part for v in report.verdicts if v.result == FAIL]
    passed = sum(v.result == PASS for v in report.verdicts)
    console.print(f"{report.backend}: " + (f"FAILS ({', '.join(failed)})" if failed else
                                            f"passes ({passed} parts passed, the others skipped here)"),
                  soft_wrap=True, markup=False, highlight=False)
    raise typer.Exit(report.exit_code)
