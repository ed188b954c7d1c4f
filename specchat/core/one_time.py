"""Work a model needs once per file, build and machine (its kernel verdict, its cost curve), done while no reply runs.

Why: a first launch used to measure these on the first reply's path, 20-30 s before the window could answer, while
later launches read them from the user cache. A model now answers at once: until a measurement is in, the engine
does without it (no drafting, which needs both), and the measurement runs in the background once the model has been
idle for IDLE_S. A reply that starts meanwhile interrupts it at its next pass, and it is tried again at the next
idle spell, so a measurement never shares the cores with a reply for longer than one pass, and its timings are
never taken beside a reply's passes.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

log = logging.getLogger(__name__)

IDLE_S = 1.0  # how long no reply must have run before a measurement starts
MEASURE_NOW_ENV = "SPECCHAT_MEASURE_NOW"


class Interrupted(Exception):
    """A reply started: the measurement stops at its next pass and is tried again later."""


Task = Callable[[Callable[[], None]], None]  # a measurement, given a check to call between its passes


_ALIVE: weakref.WeakSet = weakref.WeakSet()  # every OneTimeWork, stopped at exit before the models are freed


@atexit.register
def _stop_all() -> None:
    for work in list(_ALIVE):
        work.stop()


@dataclass(eq=False)
class OneTimeWork:
    """The measurements still owed for one loaded model, and whether a reply is running on it. One measurement
    runs at a time, in the background worker or in a thread that settles (`_running`)."""

    _pending: dict[str, Task] = field(default_factory=dict)
    _running: str | None = None
    _running_in: int | None = None  # the thread running it (threading.get_ident)
    _settling: int = 0  # threads in settle(): the worker gives way to them
    _replies: int = 0
    _stopped: bool = False
    # made with the model: the first idle spell starts then, so that nothing runs beside a question asked at once
    # (on two cores a third busy thread slows llama.cpp's team: a preload beside it cost a first question 45 ms)
    _last_reply: float = field(default_factory=time.monotonic)
    _worker: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _changed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self._changed = threading.Condition(self._lock)
        _ALIVE.add(self)

    def owe(self, name: str, task: Task, replace: bool = False) -> None:
        """Adds a measurement (once per name; `replace`: this task replaces one of the same name still owed) and
        starts the background worker that runs it when idle; with SPECCHAT_MEASURE_NOW=1 (the tests: no thread
        measuring beside them), runs it here and now instead."""
        now = os.environ.get(MEASURE_NOW_ENV) == "1"
        with self._lock:
            if self._stopped:
                return
            if replace:
                self._pending[name] = task
            else:
                self._pending.setdefault(name, task)
            # Owed by the running measurement itself (its passes keep a prompt's state: state_shelf.py): the loop
            # running it runs this next; settling here would wait for the caller forever.
            nested = self._running_in == threading.get_ident()
            if not now and not nested and (self._worker is None or not self._worker.is_alive()):
                self._worker = threading.Thread(target=self._work, name="specchat-one-time", daemon=True)
                self._worker.start()
        if now and not nested:
            self.settle()

    def stop(self) -> None:
        """Drops what is owed and waits for a running measurement to stop at its next pass: before the model's
        memory is freed, and at exit."""
        with self._changed:
            self._stopped = True
            dropped, self._pending = self._pending, {}
            self._changed.notify_all()
            worker = self._worker
        # Dropped here, with the lock released: an owed task may hold the last reference to its model, whose freeing
        # (LlamaCppModel.__del__) stops this work again. Dropped under the lock, that hung `specchat generate` at exit.
        del dropped
        if worker is not None and worker is not threading.current_thread():
            worker.join()

    def owes(self, name: str) -> bool:
        with self._lock:
            return name in self._pending

    def drop(self, name: str) -> None:
        """Owes `name` no longer (a one-shot command ends before a reading ahead could serve anything)."""
        with self._lock:
            self._pending.pop(name, None)

    def owed(self) -> list[str]:
        """The names of the measurements still owed."""
        with self._lock:
            return list(self._pending)

    @contextmanager
    def reply(self) -> Iterator[None]:
        """Marks a reply's span: measurements stop at their next pass, and wait until the model is idle again."""
        with self._changed:
            self._replies += 1
        try:
            yield
        finally:
            with self._changed:
                self._replies -= 1
                self._last_reply = time.monotonic()
                self._changed.notify_all()

    def settle(self) -> None:
        """Runs every owed measurement now, in this thread (a benchmark wants its costs measured before it times
        anything; a one-shot command measures after its reply; the tests), once the worker has given way."""
        with self._changed:
            self._settling += 1
            self._changed.notify_all()
        try:
            while (task := self._take(lambda: False)) is not None:
                self._run(*task, lambda: None)
        finally:
            with self._changed:
                self._settling -= 1
                self._changed.notify_all()

    def _work(self) -> None:
        """The background worker: each owed measurement in turn, once the model has been idle for IDLE_S."""
        while (task := self._take(self._busy)) is not None:
            self._run(*task, self._check)

    def _busy(self) -> bool:
        """Whether the worker must wait (called with the lock held): a reply runs or ran within IDLE_S, or a
        thread settles."""
        return bool(self._replies or self._settling or time.monotonic() - self._last_reply < IDLE_S)

    def _take(self, wait: Callable[[], bool]) -> tuple[str, Task] | None:
        """The next owed measurement, marked running, once none runs and `wait()` is false; None when none is owed."""
        with self._changed:
            while self._pending and (self._running is not None or wait()):
                self._changed.wait(timeout=IDLE_S)
            if not self._pending:
                return None
            self._running, self._running_in = next(iter(self._pending)), threading.get_ident()
            return self._running, self._pending[self._running]

    def _run(self, name: str, task: Task, check: Callable[[], None]) -> None:
        """Runs one measurement; done (or failed: not retried in a loop, the engine does without it) it is no longer
        owed; interrupted, it stays owed."""
        done = False
        try:
            task(check)
            done = True
        except Interrupted:
            pass
        except Exception:
            log.exception("a one-time measurement (%s) failed", name)
            done = True
        finally:
            with self._changed:
                self._running = self._running_in = None
                if done and self._pending.get(name) is task:  # not a task that replaced it meanwhile
                    self._pending.pop(name, None)
                self._changed.notify_all()

    def _check(self) -> None:
        """Raises Interrupted when a reply has started since the measurement began, a thread settles, or the model
        is closing."""
        if self._replies or self._settling or self._stopped:
            raise Interrupted
