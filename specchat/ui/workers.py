"""Background work for the window: jobs, and the long-lived threads that run them one at a time.

Every piece of model work (loading, calibration, chat replies, races, benchmarks, and the engines they build) runs
on the session's one model thread. Torch's OpenMP gives each thread that calls it a team of its own and keeps the
teams of threads that stay alive, so spreading torch work over short-lived threads slows generation; one thread
that does all of it keeps a single team. The engine is Qt-free and generator-based; the jobs turn its yields into
Qt signals, queued to the GUI thread. Only plain data crosses: StepEvents, GenerationResults and the loaded
ModelPair.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Callable, ClassVar

import torch
from PySide6.QtCore import QObject, QThread, Signal, Slot

from ..engine import GenerationConfig, SpecchatError
from ..engine.events import GenerationResult, GenerationStats
from ..engine.speculative import SpeculativeEngine

NOT_RUN_MESSAGE = "Stopped before it started."


def describe_failure(error: BaseException) -> str:
    """A message for the user: what happened and what to do."""
    if isinstance(error, SpecchatError):
        return str(error)
    if isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower():
        return ("The device ran out of memory. Choose a smaller model, lower the maximum reply length, "
                "or switch the device to CPU in Settings.")
    if isinstance(error, MemoryError):
        return "The computer ran out of memory. Close other programs or choose a smaller model."
    return f"Unexpected error: {type(error).__name__}: {error}"


def log_unexpected(error: BaseException) -> None:
    """Bugs keep their traceback on stderr; errors the user can act on need none."""
    if not isinstance(error, SpecchatError):
        traceback.print_exception(error)


class ModelJob(QObject):
    """One piece of background work; each subclass defines run(), the work itself, reporting through its own
    signals. A JobThread calls execute(), which calls run() or, when the job's cancel
    event was set before it started, not_run(): either way the job reports its end exactly once, through its
    subclass's signals or `failed`, so the window that waits for it always hears back.

    Jobs are not moved to the thread that runs them: they stay in the thread that made them (the GUI thread), so
    their signals reach that thread queued, whether connected to a window's method or to a plain function."""

    failed = Signal(str)

    def __init__(self, cancel: threading.Event | None = None):
        super().__init__()
        self.cancel = cancel
        self._ended = threading.Event()

    def execute(self) -> None:
        try:
            if self.cancel is not None and self.cancel.is_set():
                self.not_run()
            else:
                self.run()
        except Exception as error:  # reported in the window; the app, and the thread, stay usable
            log_unexpected(error)
            self.failed.emit(describe_failure(error))
        finally:
            self._ended.set()

    def not_run(self) -> None:
        self.failed.emit(NOT_RUN_MESSAGE)

    def ended(self) -> bool:
        return self._ended.is_set()

    def wait(self, timeout_ms: int) -> bool:
        """Blocks until the job has ended (its end is reported, not yet delivered), at most timeout_ms; whether it
        has."""
        return self._ended.wait(timeout_ms / 1000)


class GenerationWorker(ModelJob):
    """Streams one reply. Steps go to the GUI thread in batches, at most one every BATCH_S: on llama.cpp a step
    takes a few milliseconds, and a queued signal per step woke the GUI thread (and took the GIL) ~150 times a
    second on the cores the model's threads use; the window draws at most ~30 frames a second anyway."""

    BATCH_S = 0.02
    steps = Signal(object)  # list[StepEvent], in order
    finished = Signal(object)  # GenerationResult

    def __init__(self, make_engine: Callable[[], SpeculativeEngine], prompt_ids: list[int], config: GenerationConfig,
                 cancel: threading.Event, on_result: Callable[[GenerationResult], None] | None = None):
        """make_engine is called on the model thread (building an engine is torch work, kept off the GUI thread:
        see ChatSession.engine_maker); so is on_result, with the finished reply, before the window hears of it."""
        super().__init__(cancel)
        self.make_engine, self.prompt_ids, self.config = make_engine, prompt_ids, config
        self.on_result = on_result

    def run(self) -> None:
        batch: list = []
        sent = 0.0  # the first step goes at once, so the reply starts showing as soon as it can
        for event in self.make_engine().stream(self.prompt_ids, self.config, self.cancel):
            batch.append(event)
            now = time.perf_counter()
            if event.result is not None or now - sent >= self.BATCH_S:
                self.steps.emit(batch)
                batch, sent = [], now
            if event.result is not None:
                if self.on_result is not None:
                    self.on_result(event.result)
                self.finished.emit(event.result)

    def not_run(self) -> None:
        """A reply stopped before it started ends as a stopped reply with no tokens."""
        self.finished.emit(GenerationResult(
            text="", token_ids=(), origins=(), spans=(), finish_reason="cancelled",
            stats=GenerationStats(prompt_tokens=len(self.prompt_ids)), seed=self.config.seed or 0))


class RaceWorker(ModelJob):
    """Runs a race's lanes one after the other (engine.race.RaceRunner) and reports each lane's steps."""

    step = Signal(int, object)  # lane, StepEvent
    lane_finished = Signal(int, object)  # lane, GenerationResult
    finished = Signal()

    def __init__(self, runner, prompt_ids: list[int], drafters: list[str], config: GenerationConfig,
                 cancel: threading.Event):
        super().__init__(cancel)
        self.runner, self.prompt_ids, self.drafters, self.config = runner, prompt_ids, drafters, config

    def run(self) -> None:
        for lane, event in self.runner.stream(self.prompt_ids, self.drafters, self.config, self.cancel):
            self.step.emit(lane, event)
            if event.result is not None:
                self.lane_finished.emit(lane, event.result)
        self.finished.emit()

    def not_run(self) -> None:
        """A race stopped before it started ends like one stopped early: no lane finished, nothing to save."""
        self.finished.emit()


_FAIL = object()


class CallWorker(ModelJob):
    """Runs one function (model loading, calibration, a benchmark, a download) and reports its value or failure.
    Cancelled before it starts, it reports `if_not_run` through done when given (a benchmark: no records), and
    otherwise fails with NOT_RUN_MESSAGE."""

    done = Signal(object)

    def __init__(self, function: Callable[[], object], cancel: threading.Event | None = None, if_not_run=_FAIL):
        super().__init__(cancel)
        self.function, self.if_not_run = function, if_not_run

    def run(self) -> None:
        self.done.emit(self.function())

    def not_run(self) -> None:
        if self.if_not_run is _FAIL:
            super().not_run()
        else:
            self.done.emit(self.if_not_run)


class _Executor(QObject):
    """Lives in a JobThread's thread and runs the jobs sent to it. Each runs to its end inside one queued slot
    call, so the thread's event loop takes the next only then: one job at a time, in the order they were sent."""

    ended = Signal(object)  # the job, after the job's own report

    @Slot(object)
    def execute(self, job: ModelJob) -> None:
        job.execute()
        self.ended.emit(job)

    @Slot()
    def quit(self) -> None:
        QThread.currentThread().quit()


class JobThread(QObject):
    """A QThread started on the first job and kept until stop(): it runs the jobs submitted to it one at a time,
    in submission order. Jobs arrive by a queued signal at an executor living in the thread; their results and
    steps go back to the GUI thread as queued signals, as each job defines them."""

    _send = Signal(object)
    _finish = Signal()

    # Started and not yet ended: a QThread destroyed while it runs aborts the process, so a thread whose owner is
    # let go of (or whose stop timed out) stays referenced here until it has ended.
    _alive: ClassVar[set[JobThread]] = set()

    def __init__(self, name: str):
        super().__init__()
        self.name = name
        self._thread: QThread | None = None
        self._executor: _Executor | None = None
        self._jobs: list[ModelJob] = []  # submitted and not yet known to have ended, in order
        self._stopping = False

    def submit(self, job: ModelJob) -> None:
        if self._stopping:
            raise RuntimeError(f"the {self.name} thread has been stopped")
        if self._thread is None:
            self._start()
        self._jobs.append(job)  # also keeps the job alive until its report has been delivered
        self._send.emit(job)

    def _start(self) -> None:
        self._thread = QThread()
        self._thread.setObjectName(self.name)
        self._executor = _Executor()
        self._executor.moveToThread(self._thread)
        self._send.connect(self._executor.execute)  # queued: the executor lives in the other thread
        self._finish.connect(self._executor.quit)
        self._executor.ended.connect(self._on_ended)  # queued back, after the job's own report
        self._thread.start()
        JobThread._alive.add(self)

    @Slot(object)
    def _on_ended(self, job: ModelJob) -> None:
        if job in self._jobs:
            self._jobs.remove(job)

    def jobs(self) -> list[ModelJob]:
        """The running job (first) and those waiting."""
        return [job for job in self._jobs if not job.ended()]

    def is_running(self) -> bool:
        return self._thread is not None and self._thread.isRunning()

    def thread_object(self) -> QThread | None:
        return self._thread

    def stop(self, timeout_ms: int | None = 10_000) -> bool:
        """Cancels every job (the running one stops at its next check, the waiting ones report that they did not
        run), then ends the thread after them; waits at most timeout_ms (None: as long as it takes). True when the
        thread has ended; if not, it is kept (see _alive) and a later stop may wait again."""
        self._stopping = True
        for job in self._jobs:
            if job.cancel is not None:
                job.cancel.set()
        if self._thread is None:
            return True
        if self._thread.isRunning():
            self._finish.emit()  # queued behind the jobs, so each reports before the thread ends
            ended = self._thread.wait() if timeout_ms is None else self._thread.wait(timeout_ms)
            if not ended:
                return False
        JobThread._alive.discard(self)
        return True

    @classmethod
    def stop_all(cls, timeout_ms: int | None = 10_000) -> bool:
        """Stops every started thread; True when none is left running."""
        return all([thread.stop(timeout_ms) for thread in list(cls._alive)])

    @classmethod
    def running(cls) -> list[JobThread]:
        return [thread for thread in cls._alive if thread.is_running()]
