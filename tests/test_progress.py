"""The sweep's progress bar ends on the finished count (#49: a torchrun --resume ended on a stale "2/9, 1:24 left"
frame, as the ranks already on disk never advanced it)."""

import io
import re

from rich.console import Console

from cpbench.cli.sweep import run_sweep
from cpbench.ranks.group import LocalGroup
from sweepcfg import grid_config, output


class EveryRankHere(LocalGroup):
    """A torchrun launch's rows without starting processes: every rank measured here, ``launch`` torchrun."""

    launch = "torchrun"


class RankZeroOnly(EveryRankHere):
    """Rank 0 of that launch as its writer sees the cells: one local rank of each cell."""

    def local_ranks(self, cp_size, wanted=None):
        return [0]


def _last_frame(cfg, out, resume: bool, group) -> str:
    text = io.StringIO()
    assert run_sweep(cfg, output(out, resume=resume), console=Console(file=text, width=200), group=group) == 0
    frames = [x for x in text.getvalue().splitlines() if re.search(r" \d+/\d+ \d+:\d\d:\d\d ", x)]
    return frames[-1]


def test_a_resume_with_every_rank_on_disk_ends_on_the_finished_count(tmp_path):
    cfg = grid_config(bs_list=(1, 2), extend_len_list=(32,), check=False)
    first = _last_frame(cfg, tmp_path / "run", False, EveryRankHere())
    assert first.startswith("cp2 bs2 extend32 ") and re.search(r" 4/4 ", first), first  # two cells, two ranks
    again = _last_frame(cfg, tmp_path / "run", True, RankZeroOnly())  # rank 0's share, all of it on disk
    assert re.search(r" 2/2 ", again) and "-:--:--" not in again, again  # was "0/2 0:00:00 -:--:--"
