"""Keeping llama.cpp's passes from collapsing when another busy process shares the cores (LlamaCppRunner)."""

from __future__ import annotations


class ThreadGovernor:
    """Keeps llama.cpp's passes from collapsing when another busy process shares the cores.

    llama.cpp's threads meet at a barrier after every operation (hundreds a pass) and spin there; when another
    process takes one of the cores, each barrier waits for a descheduled thread's next time slice, and a pass can
    take many times its usual time. One thread has no barriers. So a pass far slower than the fastest seen for
    its size at full threads switches the context to one thread for a while, then full threads are tried again,
    after twice as long each time they are still slow. The thread count does not change a pass's numbers (each
    output row is computed by one thread either way; checked in the tests), so this costs no exactness."""

    SLOW = 4.0  # a pass this many times slower than the best seen for its size means contention
    COOLDOWN = 64  # passes at one thread before full threads are tried again (doubling while still contended)
    MAX_COOLDOWN = 4096

    def __init__(self, threads: int):
        self.threads = threads
        self.best: dict[int, float] = {}  # fastest pass seen at full threads, by tokens in the pass
        self.cooldown = self.COOLDOWN
        self._left = 0  # passes still to run at one thread

    def threads_for_next_pass(self) -> int:
        """The threads the next pass runs on: one while a contention's rest lasts, else all."""
        if self._left > 0:
            self._left -= 1
            return 1
        return self.threads

    def observe(self, tokens: int, threads: int, seconds: float) -> None:
        if threads != self.threads or self.threads == 1:
            return
        best = self.best.get(tokens)
        if best is not None and seconds > self.SLOW * best:
            self._left = self.cooldown
            self.cooldown = min(2 * self.cooldown, self.MAX_COOLDOWN)
            return
        self.best[tokens] = seconds if best is None else min(best, seconds)
        self.cooldown = self.COOLDOWN  # full threads ran at speed: contention is over
