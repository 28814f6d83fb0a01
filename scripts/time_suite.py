"""Time the test suite with the host's speed sampled beside it (does not import cpbench).

    python scripts/time_suite.py [pytest args...]      # default: -q, as the README's test command

Runs ``python -m pytest`` with the given arguments and, every 10 s while it runs, times a fixed pure-Python loop
(10^6 additions at module level) in this process with ``time.process_time``: the CPU seconds the loop needs,
scaled to 10^7 steps, measure how fast the host runs Python at that moment (a shared or throttled host can take
twice as long for the same loop from one hour to the next). Prints the suite's wall time, the CPU seconds of the
processes it ran (user + sys of every reaped child), the mean loop time and both times divided by it, so that
two runs on a host whose speed moved can still be compared. Exits with pytest's code.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import threading
import time

PERIOD_S = 10.0
# the loop as a script runs it at module level (``s=0`` then ``for i in range(10**7): s+=i``, global names): the
# figure docs/testing.md's host speeds quote; 10^6 steps here, scaled to 10^7
LOOP = compile("s = 0\nfor i in range(10**6):\n    s += i\n", "<loop>", "exec")


def loop_s() -> float:
    """CPU seconds of the 10^7-step module-level loop, from a 10^6-step one."""
    t = time.process_time()
    exec(LOOP, {})
    return (time.process_time() - t) * 10


def main(args: list[str]) -> int:
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(loop_s())
            done.wait(PERIOD_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "pytest", *(args or ["-q"])])
    wall = time.monotonic() - start
    done.set()
    sampler.join()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru.ru_utime + ru.ru_stime
    loop = statistics.mean(samples)
    print(f"suite: {wall:.0f} s wall, {cpu:.0f} CPU-s; 10^7-step loop: {loop:.2f} s (mean of {len(samples)}, "
          f"{min(samples):.2f}-{max(samples):.2f}); per loop-second: {wall / loop:.0f} wall, {cpu / loop:.0f} CPU")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
