"""Where the engine's time goes: a profile of named phases, read into GenerationStats (engine/decoding/events.py).

The loop wraps each phase of its work in `with profile.phase(name):`. A second counts once, for the innermost phase
open at the time: the draft-length policy's deliberation inside drafting is the policy's, not the draft's. Time
outside every phase (the loop's own bookkeeping) is not counted. The clock is perf_counter, the CPU's monotonic
clock: cheap to read, and read twice a phase, so profiling costs next to nothing against a pass.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator


class Profile:
    """Seconds per phase since the profile was made: one per decoding step (draft, verify, accept, rollback,
    policy, detokenize), one per generation (prefill, event, and the elapsed wall time)."""

    def __init__(self) -> None:
        self.started = self._last = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self._open: str | None = None  # the innermost phase open now

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.seconds.setdefault(name, 0.0)
        outer = self._switch(name)
        try:
            yield
        finally:
            self._switch(outer)

    def elapsed(self) -> float:
        """Seconds since the profile was made, in phases or not."""
        return time.perf_counter() - self.started

    def _switch(self, name: str | None) -> str | None:
        """Charges the seconds since the last switch to the phase open until now, opens `name` (None: no phase) and
        returns the one it replaced."""
        now = time.perf_counter()
        if self._open is not None:
            self.seconds[self._open] += now - self._last
        previous, self._open, self._last = self._open, name, now
        return previous
