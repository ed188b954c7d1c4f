"""The Settings dialog's pair check, run off the GUI thread.

Checking a draft against a target reads both tokenizers, and reading a GGUF file's tokenizer converts it the first
time: half a minute for the offline Qwen pair, during which the window once answered nothing (issue 37). The check
runs on a JobThread as a GeneratorWorker; what it is doing, and then its verdict, come back as signals. Only the
newest check counts: a newer one (the user picked another model) drops the older one's verdict.
"""

from __future__ import annotations

import inspect
import threading
from typing import Callable, Generator

from PySide6.QtCore import QObject, Signal

from .workers import GeneratorWorker, JobThread, describe_failure, log_unexpected


class PairCheck(QObject):
    """Runs check(target, draft) on `thread` (a thread of its own when None, ended by close()). The check returns
    (ok, message); a generator function may first yield what it is doing. `progress(step)` says what the newest
    check is doing, `checked(ok, message)` gives its verdict."""

    progress = Signal(str)
    checked = Signal(bool, str)

    def __init__(self, check: Callable, thread: JobThread | None = None, parent=None):
        super().__init__(parent)
        self._check = check
        self._own_thread = thread is None
        self.thread = thread if thread is not None else JobThread("specchat-pair-check")
        self._generation = 0
        self._cancel = threading.Event()
        self.running = False

    def start(self, target: str, draft: str) -> None:
        """Checks the pair on the thread, dropping any check under way."""
        self.cancel()
        generation, check = self._generation, self._check
        self._cancel = cancel = threading.Event()
        job = GeneratorWorker(lambda: _checking(check, target, draft, generation), cancel, if_not_run=None)
        job.yielded.connect(self._on_step)  # bound methods: reports that arrive after this object are dropped
        job.returned.connect(self._on_verdict)
        self.running = True
        self.thread.submit(job)

    def cancel(self) -> None:
        """Drops the check under way: one still waiting does not run, a running one's verdict is not taken (the
        tokenizer it reads cannot be interrupted)."""
        self._cancel.set()
        self._generation += 1
        self.running = False

    def close(self) -> None:
        """Cancels, and ends a thread of its own once its running check returns, without waiting for it here (the
        app's exit waits: JobThread.stop_all)."""
        self.cancel()
        if self._own_thread:
            self.thread.stop(timeout_ms=0)

    def _on_step(self, report: tuple[int, str]) -> None:
        generation, step = report
        if generation == self._generation:
            self.progress.emit(step)

    def _on_verdict(self, verdict: tuple[int, bool, str] | None) -> None:
        if verdict is None or verdict[0] != self._generation:
            return  # not run (cancelled before it started), or a newer check was asked for
        self.running = False
        self.checked.emit(verdict[1], verdict[2])


def _checking(check: Callable, target: str, draft: str, generation: int
              ) -> Generator[tuple[int, str], None, tuple[int, bool, str]]:
    """Runs one check on the job's thread: yields (generation, step) for each step it reports and returns
    (generation, ok, message); an unexpected failure is a verdict too (not compatible, and why)."""
    try:
        outcome = check(target, draft)
        if inspect.isgenerator(outcome):
            steps = outcome
            while True:
                try:
                    step = next(steps)
                except StopIteration as end:
                    outcome = end.value
                    break
                yield generation, str(step)
        ok, message = outcome
    except Exception as error:  # the dialog says it; the thread stays usable
        log_unexpected(error)
        return generation, False, describe_failure(error)
    return generation, bool(ok), str(message)
