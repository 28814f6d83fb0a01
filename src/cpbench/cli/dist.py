"""The options and flow shared by commands that can run one process per rank (sweep, profile):
``--launch torchrun`` re-runs the command under ``torchrun --standalone``; a process started by
torchrun (RANK/WORLD_SIZE set) joins the launch and runs the command's body with its rank group."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer
from rich.markup import escape

from cpbench.ranks import faults
from cpbench.ranks.launch import under_torchrun, world_size_from_env
from cpbench.cli.options import err_console
from cpbench.errors import CpbenchInputError

MIN_TIMEOUT_S, MAX_TIMEOUT_S = 5.0, 86400.0


class Launch(str, Enum):
    simulated = "simulated"
    torchrun = "torchrun"


class Gather(str, Enum):
    packed = "packed"
    separate = "separate"
    none = "none"


class DistBackend(str, Enum):
    auto = "auto"
    nccl = "nccl"
    gloo = "gloo"


LaunchOpt = Annotated[Launch, typer.Option(
    "--launch", help="simulated: every rank in this process, one after another; torchrun: one process per rank "
                     "(re-runs cpbench under torchrun --standalone; started by your own torchrun, cpbench runs "
                     "distributed anyway).")]
NprocOpt = Annotated[Optional[int], typer.Option(
    "--nproc-per-node", help="Processes (one per GPU) for --launch torchrun. Default: the visible GPU count.")]
GatherOpt = Annotated[Optional[Gather], typer.Option(
    "--gather", help="Per-layer K|V all-gather of a torchrun launch: packed (one all_gather_into_tensor of "
                     "K and V packed side by side, as SGLang), separate (K then V), none (attention only). Default: packed.")]
DistBackendOpt = Annotated[DistBackend, typer.Option(
    "--dist-backend", help="torch.distributed backend: nccl on GPUs, gloo on CPU (auto).")]
DistTimeoutOpt = Annotated[float, typer.Option(
    "--dist-timeout", help="Timeout of every process group, and so of every collective, s.")]


@dataclass
class DistOptions:
    """The launch options of one command (--launch, --nproc-per-node, --gather, --dist-backend,
    --dist-timeout in seconds)."""

    launch: Launch
    nproc_per_node: Optional[int]
    gather: Optional[Gather]
    dist_backend: DistBackend
    dist_timeout: float

    @property
    def distributed(self) -> bool:
        return self.launch == Launch.torchrun or under_torchrun()

    @property
    def gather_mode(self) -> str:
        """The gather a launch runs: ``none`` when simulated, else --gather (default packed)."""
        return (self.gather or Gather.packed).value if self.distributed else "none"

    def check(self, ranks, cp_sizes=()) -> None:
        """Raise CpbenchInputError for options that do not fit together (and, inside a launch started by
        the user's own torchrun, a cp_size that does not divide its world size)."""
        if self.gather not in (None, Gather.none) and not self.distributed:
            raise CpbenchInputError(f"--gather {self.gather.value} needs --launch torchrun (a simulated launch has "
                                    "no collective): drop --gather or add --launch torchrun")
        if not self.distributed and os.environ.get(faults.ENV, "").strip():
            raise CpbenchInputError(f"{faults.ENV} fails ranks of a --launch torchrun and has no effect on a "
                                    "simulated launch: add --launch torchrun, or unset it")
        if self.nproc_per_node is not None and not self.distributed:
            raise CpbenchInputError("--nproc-per-node sets the processes of --launch torchrun; a simulated launch "
                                    "runs every rank in this process: add --launch torchrun or drop it")
        if self.distributed and ranks is not None:
            raise CpbenchInputError("--ranks does not apply to --launch torchrun (every rank takes part in the "
                                    "all-gather): drop --ranks")
        if not (MIN_TIMEOUT_S <= self.dist_timeout <= MAX_TIMEOUT_S):  # NaN fails too
            raise CpbenchInputError(f"--dist-timeout must be {MIN_TIMEOUT_S:g} to {MAX_TIMEOUT_S:g} s (one day), got "
                                    f"{self.dist_timeout:g}: every collective waits that long for a slow rank")
        if self.distributed and under_torchrun():
            world = world_size_from_env()
            bad = [c for c in cp_sizes if world % c]
            if bad:
                raise CpbenchInputError(f"--cp {bad[0]} does not divide the launch's world size {world}: a cell of "
                                        "cp_size C runs on the first C ranks, so C must divide WORLD_SIZE")


def launch_torchrun(opts: DistOptions, cp_sizes, dev, backend: str, out: Optional[str], kind: str,
                    resume_hint: bool = True, precheck: Optional[Callable[[int], None]] = None,
                    cell_cp_sizes: Optional[list] = None) -> int:
    """Check the launch, then re-run this command under torchrun --standalone (one process per GPU);
    return its exit code (``kind``: "" for a sweep, "profile": names the default run directory;
    ``resume_hint``: the command has --resume, so a failure message offers it; ``precheck(world_size)``:
    the command's own checks, run before any process starts, raising CpbenchInputError; ``cell_cp_sizes``:
    the cp_size of each cell the command plans, to refuse an injected fault that could never fire)."""
    import torch

    from cpbench.ranks import faults
    from cpbench.ranks.launch import check_launch, run_torchrun

    gpus = torch.cuda.device_count() if dev.type == "cuda" else 0
    nproc = opts.nproc_per_node
    if nproc is None:
        if dev.type != "cuda":
            raise CpbenchInputError("--launch torchrun on CPU needs --nproc-per-node (processes to start)")
        nproc = gpus
    check_launch(nproc, cp_sizes, dev.type, gpus, opts.dist_backend.value, backend)
    faults.parse(world_size=nproc)  # a malformed CPBENCH_INJECT_FAULT or one naming no rank: before the launch
    if cell_cp_sizes is not None:
        faults.check_can_fire(nproc, list(cell_cp_sizes), opts.gather_mode)
    if precheck is not None:
        precheck(nproc)
    argv = list(sys.argv[1:])
    if out is None:  # every rank must agree on the output directory: name it here
        from cpbench.results.store import default_run_dir

        argv += ["--out", str(default_run_dir(kind))]
    return run_torchrun(nproc, argv, resume_hint)


def run_as_rank(opts: DistOptions, dev, body: Callable[[object, object], int]) -> int:
    """One rank of a torchrun launch: join the process group, run ``body(group, device)``, leave. Rank 0's
    exit code reaches the parent launcher; only rank 0 prints an input error."""
    from cpbench.ranks import faults, process_groups as groups, watch
    from cpbench.ranks.launch import EXIT_FILE, launch_dir, write_exit_code
    from cpbench.ranks.torchrun_group import TorchrunGroup

    watch.enter_rank(launch_dir(), int(os.environ.get("RANK", "0")))
    backend = None if opts.dist_backend == DistBackend.auto else opts.dist_backend.value
    if dev.type == "cpu":
        backend = backend or "gloo"
    info = groups.init_process_group_from_env(backend, opts.dist_timeout)
    try:
        faults.parse(world_size=info.world_size)  # a malformed CPBENCH_INJECT_FAULT: an input error before any work
        code = body(TorchrunGroup(info, opts.gather_mode), info.device if dev.type == "cuda" else dev)
    except CpbenchInputError as e:
        if info.rank == 0:
            err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        code = 2
    except groups.LaunchBroken as e:  # a collective failed: leave a note and end (no teardown may block)
        if launch_dir() is None:
            sys.stderr.write(f"error: rank {info.rank}: {e}\n")
            sys.stderr.flush()
            os._exit(1)
        watch.leave_note(launch_dir(), info.rank, str(e))
        watch.await_end()  # the launcher or torchrun ends this process, naming the rank at fault
    finally:
        groups.destroy()
    write_exit_code(code)
    return 0 if os.environ.get(EXIT_FILE) else code
