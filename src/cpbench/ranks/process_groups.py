"""Process groups for a torchrun launch: the default group (NCCL on CUDA, else gloo), one gloo group
over all ranks for host-side exchange (status, result rows), and one CP group per ``cp_size``.

Every group is created with the same ``timeout``, so every collective on it fails after that long
instead of hanging (NCCL: the watchdog aborts the communicator; gloo: the call raises).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from cpbench.errors import CpbenchInputError

_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the launch. ``device`` is ``cuda:<local_rank>`` under NCCL, else cpu."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    timeout_s: float


_state: dict[str, Any] = {"info": None, "gloo": None, "cp": {}}


def _timeout(timeout_s: float) -> datetime.timedelta:
    if not timeout_s > 0:
        raise CpbenchInputError(f"the process-group timeout must be > 0 seconds, got {timeout_s!r}")
    return datetime.timedelta(seconds=timeout_s)


def _env_int(name: str) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw)
    except ValueError:
        raise CpbenchInputError(f"environment variable {name}={raw!r} is not an integer: launch "
                                "with torchrun (python3 -m torch.distributed.run)") from None


def init_process_group_from_env(backend: str | None = None, timeout_s: float = 600.0) -> DistInfo:
    """Join the launch described by torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT) and create the all-ranks gloo group.

    Args:
        backend: ``"nccl"``, ``"gloo"`` or None (NCCL when CUDA is available, else gloo).
        timeout_s: timeout of every group and so of every collective, seconds.
    Returns:
        DistInfo. Under NCCL the current CUDA device is ``cuda:<local_rank>`` and the communicator is
        created eagerly (``device_id``), as CUDA-graph capture of a collective needs.
    Raises:
        CpbenchInputError: not launched by torchrun, unknown backend, NCCL without a CUDA device for
            this local rank, or a bad timeout.
    """
    if _state["info"] is not None and dist.is_initialized():
        return _state["info"]
    rank, world_size = _env_int("RANK"), _env_int("WORLD_SIZE")
    missing = [n for n in _ENV if n not in os.environ]
    if missing:
        raise CpbenchInputError(f"{', '.join(missing)} not set: launch with torchrun "
                                "(python3 -m torch.distributed.run --nproc-per-node N ...)")
    local_rank = _env_int("LOCAL_RANK") if "LOCAL_RANK" in os.environ else rank
    name = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if name not in ("nccl", "gloo"):
        raise CpbenchInputError(f"unknown backend {name!r}: use 'nccl' or 'gloo'")
    td = _timeout(timeout_s)
    device = torch.device("cpu")
    if name == "nccl":
        n_dev = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if local_rank >= n_dev:
            raise CpbenchInputError(f"backend nccl needs a CUDA device for local rank {local_rank} but "
                                    f"{n_dev} are visible: use --nproc-per-node <= {n_dev} or gloo")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    try:
        if name == "nccl":
            dist.init_process_group("nccl", timeout=td, device_id=device)
        else:
            dist.init_process_group("gloo", timeout=td)
    except Exception as e:  # rendezvous: DistStoreError, a refused connection, a timeout
        text = (str(e).strip().splitlines() or [""])[0][:160]
        raise CpbenchInputError(
            f"rank {rank} of {world_size} could not join the launch at {os.environ.get('MASTER_ADDR')}:"
            f"{os.environ.get('MASTER_PORT')} ({type(e).__name__}: {text}): start every rank with the same "
            "MASTER_ADDR/MASTER_PORT (torchrun does), or unset RANK/WORLD_SIZE for a simulated sweep") from None
    info = DistInfo(rank, world_size, local_rank, device, name, float(timeout_s))
    _state.update(info=info, gloo=dist.new_group(backend="gloo", timeout=td), cp={})
    return info


def _info() -> DistInfo:
    if _state["info"] is None or not dist.is_initialized():
        raise CpbenchInputError("no process group: call init_process_group_from_env() first")
    return _state["info"]


def gloo_group() -> dist.ProcessGroup:
    """The gloo group over all ranks (host-side exchange)."""
    _info()
    return _state["gloo"]


def cp_subgroups(world_size: int, cp_size: int) -> dist.ProcessGroup:
    """The CP group of ranks ``0..cp_size-1`` (cached per ``cp_size``), on the default backend.

    Every rank must call this, in the same order (``dist.new_group`` is collective); ranks
    ``>= cp_size`` get ``dist.GroupMember.NON_GROUP_MEMBER`` and sit the cell out.

    Raises:
        CpbenchInputError: ``cp_size`` < 1 or not a divisor of ``world_size``, or ``world_size``
            differs from the launch's.
    """
    if isinstance(cp_size, bool) or not isinstance(cp_size, int) or cp_size < 1:
        raise CpbenchInputError(f"cp_size must be an integer >= 1, got {cp_size!r}")
    if world_size < 1 or world_size % cp_size:
        raise CpbenchInputError(f"cp_size {cp_size} does not divide world_size {world_size}: "
                                "pick a divisor of --nproc-per-node")
    info = _info()
    if world_size != info.world_size:
        raise CpbenchInputError(f"world_size {world_size} differs from the launch's {info.world_size}")
    cache = _state["cp"]
    if cp_size not in cache:
        if cp_size == world_size:
            cache[cp_size] = dist.group.WORLD
        else:
            cache[cp_size] = dist.new_group(ranks=list(range(cp_size)),
                                            timeout=_timeout(info.timeout_s))
    return cache[cp_size]


def in_group(group: dist.ProcessGroup) -> bool:
    """Whether this rank belongs to ``group`` (False for NON_GROUP_MEMBER)."""
    return group is not None and group != dist.GroupMember.NON_GROUP_MEMBER


def all_gather_object_gloo(obj: Any, group: dist.ProcessGroup | None = None) -> list[Any]:
    """Every rank's picklable ``obj``, in rank order, over gloo (default: the all-ranks gloo group)."""
    group = group or gloo_group()
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return out


def max_over_ranks(value: float | int, group: dist.ProcessGroup | None = None) -> float | int:
    """All-reduce MAX of a number over ``group`` (default: the all-ranks gloo group); returns the
    same type. Uses a cpu tensor on gloo, a tensor on the current CUDA device on NCCL."""
    group = group or gloo_group()
    is_int = isinstance(value, int) and not isinstance(value, bool)
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([value], dtype=torch.int64 if is_int else torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return int(t.item()) if is_int else float(t.item())


def broadcast_object(obj: Any, src: int = 0, group: dist.ProcessGroup | None = None) -> Any:
    """Rank ``src``'s picklable ``obj`` on every rank, over gloo (``src`` is a global rank)."""
    box = [obj]
    dist.broadcast_object_list(box, src=src, group=group or gloo_group())
    return box[0]


def destroy() -> None:
    """Destroy every group and forget them; safe to call twice or without a launch."""
    if dist.is_initialized():
        dist.destroy_process_group()
    _state.update(info=None, gloo=None, cp={})
