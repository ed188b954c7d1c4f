"""How many cores this process may use, and how much of the machine other programs used while a reply ran: the
reason a speedup against the calibration at load can be wrong.

A chat reply without enough plain steps of its own is priced against plain decoding's speed measured when the model
loaded ("calibrated"). If other programs take the cores meanwhile, the reply runs slower for reasons that are not
the drafter's, and "0.32× vs plain (calibrated)" blames it. The kernel counts every core's busy time
(/proc/stat) and this process's own (getrusage); what is left over, per second of the reply, is the others' load.
Linux only: elsewhere there is no reading, and ratios are shown as before.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
# Other programs' mean use of the cores during a reply, as a share of all of them, from which a calibrated ratio is
# not shown: on a machine where llama.cpp runs a thread on every core, a quarter of the cores taken elsewhere slows
# a reply by about that much, more than the 10-20% a drafter's gain is often made of.
BUSY_SHARE = 0.25
MIN_WALL_S = 1.0  # /proc/stat counts in ticks of 10 ms: a shorter reply's reading is mostly rounding


def usable_cores() -> int:
    """The cores this process may run on (its affinity; every core where the platform does not say): llama.cpp's
    default threads, and the most --threads takes."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class CpuReading:
    """The machine's and this process's CPU seconds so far, and when they were read (time.monotonic)."""

    machine_busy_s: float
    own_s: float
    at: float


def read_cpu(stat: Path = PROC_STAT) -> CpuReading | None:
    """The counters now; None where /proc/stat cannot be read or parsed (not Linux)."""
    try:
        busy_ticks = machine_busy_ticks(stat.read_text(encoding="ascii", errors="replace"))
    except OSError:
        return None
    if busy_ticks is None:
        return None
    import resource  # Unix only, as /proc/stat is

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return CpuReading(busy_ticks / os.sysconf("SC_CLK_TCK"), usage.ru_utime + usage.ru_stime, time.monotonic())


def machine_busy_ticks(text: str) -> int | None:
    """The busy ticks of all cores from /proc/stat's text: its first line's user, nice, system, irq, softirq and
    steal (idle and iowait left out; guest time is counted in user already). None for text that is not that."""
    first = text.split("\n", 1)[0].split()
    if len(first) < 9 or first[0] != "cpu" or not all(field.isdigit() for field in first[1:9]):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, first[1:9])
    return user + nice + system + irq + softirq + steal


def others_share(start: CpuReading | None, end: CpuReading | None, cores: int | None = None) -> float | None:
    """Other programs' mean use of the machine's cores between two readings, as a share of all of them (0: idle
    besides us, 1: every core theirs); None without two readings or over less than MIN_WALL_S."""
    if start is None or end is None or end.at - start.at < MIN_WALL_S:
        return None
    cores = cores or os.cpu_count() or 1
    others_s = (end.machine_busy_s - start.machine_busy_s) - (end.own_s - start.own_s)
    return min(max(others_s / (end.at - start.at) / cores, 0.0), 1.0)


def was_busy(start: CpuReading | None, end: CpuReading | None, cores: int | None = None) -> bool:
    """Whether other programs took at least BUSY_SHARE of the cores between the readings (False without them)."""
    share = others_share(start, end, cores)
    return share is not None and share >= BUSY_SHARE
