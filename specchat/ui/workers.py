"""Background work for the window: jobs, and the long-lived threads that run them one at a time.

Every piece of model work (loading, calibration, chat replies, races, benchmarks, and the engines they build) runs
on the session's one model thread. Torch's OpenMP gives each thread that calls it a team of its own and keeps the
teams of threads that stay alive, so spreading torch work over short-lived threads slows generation; one thread
that does all of it keeps a single team. The engine is Qt-free and generator-based; the jobs turn its yields into
Qt signals, queued to the GUI thread. Only plain data crosses: StepEvents, GenerationResults and the loaded
ModelPair.

This module is the generic machinery (jobs and their threads; it imports neither torch nor the engine): the chat's
and the race's workers are reply_workers.py's.
"""

from __future__ import annotations

import sys
import threading
import traceback
from typing import Callable, ClassVar

from PySide6.QtCore import QObject, QThread, Signal, Slot

from ..core.errors import SpecchatError

NOT_RUN_MESSAGE = "Stopped before it started."
_FAIL = object()  # no if_not_run given: a job that did not run errors


def describe_failure(error: BaseException) -> str:
    """A message for the user: what happened and what to do."""
    if isinstance(error, SpecchatError):
        return str(error)
    if _device_out_of_memory(error) or "out of memory" in str(error).lower():
        return ("The device ran out of memory. Choose a smaller model, lower the maximum reply length, "
                "or switch the device to CPU in Settings.")
    if isinstance(error, MemoryError):
        return "The computer ran out of memory. Close other programs or choose a smaller model."
    return f"Unexpected error: {type(error).__name__}: {error}"


def _device_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is torch's CUDA out-of-memory error. Only an engine raises one, and it has loaded torch by
    then: torch is looked up, never imported here."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(error, torch.cuda.OutOfMemoryError)


def log_unexpected(error: BaseException) -> None:
    """Bugs keep their traceback on stderr; errors the user can act on need none."""
    if not isinstance(error, SpecchatError):
        traceback.print_exception(error)


class ModelJob(QObject):
    """One piece of background work, napari-style: every job has the same signals and one error path.

    A JobThread calls execute(). It emits `started`, then each value the work yields through `yielded`, then its
    value through `returned`; or, when the work raises, the user's message through `errored`; and in every case
    `finished` last. A job whose cancel event was set before it started does not run: it returns `if_not_run`
    when it has one (a stopped reply, an empty benchmark) and otherwise errors with NOT_RUN_MESSAGE. So the window
    that waits for a job always hears back exactly once, through `returned` or `errored`.

    The work is a function: its value is what the job returns (FunctionWorker); GeneratorWorker's function makes a
    generator, whose values it yields and whose return value it returns. Jobs are not moved to the thread that runs
    them: they stay in the thread that made them (the GUI thread), so their signals reach that thread queued,
    whether connected to a window's method or to a plain function."""

    started = Signal()
    yielded = Signal(object)
    returned = Signal(object)
    errored = Signal(str)
    finished = Signal()

    def __init__(self, work: Callable[[], object], cancel: threading.Event | None = None, if_not_run=_FAIL):
        super().__init__()
        self.work = work
        self.cancel = cancel
        self.if_not_run = if_not_run
        self._ended = threading.Event()

    def execute(self) -> None:
        try:
            if self.cancel is not None and self.cancel.is_set():
                self._not_run()
            else:
                self.started.emit()
                self.returned.emit(self.run())
        except Exception as error:  # reported in the window; the app, and the thread, stay usable
            log_unexpected(error)
            self.errored.emit(describe_failure(error))
        finally:
            self._ended.set()
            self.finished.emit()

    def run(self) -> object:
        """Does the work on the job's thread and gives its value."""
        return self.work()

    def _not_run(self) -> None:
        if self.if_not_run is _FAIL:
            self.errored.emit(NOT_RUN_MESSAGE)
        else:
            self.returned.emit(self.if_not_run)

    def ended(self) -> bool:
        return self._ended.is_set()

    def wait(self, timeout_ms: int) -> bool:
        """Blocks until the job has ended (its end is reported, not yet delivered), at most timeout_ms; whether it
        has."""
        return self._ended.wait(timeout_ms / 1000)


class FunctionWorker(ModelJob):
    """Runs one function (model loading, calibration, a benchmark, a download) and returns its value: a ModelJob
    as it is, named for what it runs."""


class GeneratorWorker(ModelJob):
    """Runs a generator: `work` makes it, each value it yields goes out through `yielded`, and its return value
    through `returned`. The generator is made on the job's thread (work is called there), so whatever it builds
    before its first yield (an engine, say) is built there too."""

    def run(self) -> object:
        generator = self.work()
        while True:
            try:
                value = next(generator)
            except StopIteration as end:
                return end.value
            self.yielded.emit(value)


class ReportingWorker(ModelJob):
    """Runs a function that reports as it goes: work(report) is called on the job's thread, and each value it
    passes to report goes out through `yielded` (queued to the GUI thread); its value is returned. For work whose
    progress comes from a callback deep inside Qt-free code (the store's import), which a generator cannot reach."""

    def __init__(self, work: Callable[[Callable[[object], None]], object], cancel: threading.Event | None = None,
                 if_not_run=_FAIL):
        super().__init__(lambda: work(self.yielded.emit), cancel, if_not_run)


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
