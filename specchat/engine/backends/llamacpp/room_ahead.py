"""Room made ahead: the larger decoding context and prompt reader that a chat's next turn will need, made in the
model's idle time (core/one_time.py) rather than on that turn's first token's path.

Why: a runner's contexts grow in steps (LlamaCppRunner.new_cache), and llama.cpp makes a context by allocating and
clearing its whole KV cache: about 12 ms per 1,024 positions for each of the two contexts on the embedded model
here, 0.2 s for a 4,000-token document's chat. A chat continued after a restart (its state preloaded: state_shelf.py)
or a chat about to outgrow its context paid that on its next turn's first token. The runner says how large the next
turn may be (LlamaCppRunner.owe_room); the contexts are made then, in the idle time, and whichever of the model's
runners must grow first takes them (take). The room is the model's (LlamaCppModel.room), one pair per kind of
runner, freed with the model: it is made for the largest need among the runners that have said theirs (`needs`),
and the race's lanes or the calibration's engine never hold a pair each.
What it holds is bounded as the kept states are: only a state in the shelf's memory counts (512 MiB by default, a
preload fills half of it), so a chat about a 30,000-token document, whose state the memory tier does not hold, is
not made room for ahead; its contexts are made when its next turn comes, as before.
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable


class RoomAhead:
    """A decoding context and a prompt reader of one size, made ahead for a model's runners. Thread-safe: made by
    the idle worker, taken on the model's thread (which waits for a make in progress rather than making its own)."""

    def __init__(self, make_context: Callable[[int], object], free_context: Callable[[object], None],
                 make_reader: Callable[[int], object]):
        """`make_context(n_ctx)`: a decoding context of n_ctx positions (raises where llama.cpp cannot make it);
        `free_context(ctx)` frees one; `make_reader(n_ctx)`: a PromptReader of that size (closed with close())."""
        self._make_context, self._free_context, self._make_reader = make_context, free_context, make_reader
        self._lock = threading.Lock()
        self._ctx: object | None = None
        self._reader = None
        self.n_ctx = 0  # the size made ahead (0: nothing)
        # each runner's latest turn (note), held weakly: a runner gone needs nothing; its own lock, as a make
        # holds _lock for as long as llama.cpp takes to make a context
        self._needs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._needs_lock = threading.Lock()

    def note(self, runner: object, turn: int) -> None:
        """Keeps `runner`'s latest need (the positions of the turn it just ended; LlamaCppRunner.owe_room)."""
        with self._needs_lock:
            self._needs[runner] = turn

    def needs(self) -> list[tuple[object, int]]:
        """(runner, turn) for every live runner that said its need: a copy, taken under the lock (the model's
        thread notes while the idle worker reads). The caller drops it before making room, so that a runner the
        app let go is not kept alive by it (nor freed on the worker's thread)."""
        with self._needs_lock:
            return list(self._needs.items())

    def make(self, n_ctx: int, check: Callable[[], None], with_reader: bool, state_bytes: int = 0) -> None:
        """Makes a context of `n_ctx` positions unless one as large is ready (a smaller one is freed first), then,
        with `with_reader`, its prompt reader, its state buffer ready for `state_bytes` (PromptReader.reserve);
        `check` runs between the two (one_time's interruption: a reply that starts meanwhile finds the context
        ready, and the reader is made at the next idle spell)."""
        with self._lock:
            if self.n_ctx < n_ctx:
                self._free()
                self._ctx, self.n_ctx = self._make_context(n_ctx), n_ctx
        check()
        if with_reader:
            with self._lock:
                if self._ctx is not None and self._reader is None:
                    self._reader = self._make_reader(self.n_ctx)
                    if state_bytes:
                        self._reader.reserve(state_bytes)

    def take(self, n_ctx: int) -> tuple[object, int, object | None] | None:
        """(context, its positions, its reader or None) when the room made ahead holds `n_ctx` positions or more,
        handed over to the caller; else None (and a smaller room is freed: the caller makes a larger context)."""
        with self._lock:
            if self._ctx is None:
                return None
            if self.n_ctx < n_ctx:
                self._free()
                return None
            taken = (self._ctx, self.n_ctx, self._reader)
            self._ctx, self._reader, self.n_ctx = None, None, 0
            return taken

    def free(self) -> None:
        """Frees what was made ahead (the runner goes, or made its contexts otherwise)."""
        with self._lock:
            self._free()

    def _free(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._ctx is not None:
            self._free_context(self._ctx)
        self._ctx, self._reader, self.n_ctx = None, None, 0
