"""Background work for the window: loading models and generating, each in a QThread.

The engine is Qt-free and generator-based; these workers turn its yields into Qt signals (queued to the GUI
thread). Only plain data crosses: StepEvents, GenerationResults and the loaded ModelPair.
"""

from __future__ import annotations

import threading
import traceback
from typing import Callable

import torch
from PySide6.QtCore import QObject, QThread, Signal, Slot

from ..engine import GenerationConfig, SpecchatError
from ..engine.speculative import SpeculativeEngine


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


class GenerationWorker(QObject):
    step = Signal(object)  # StepEvent
    finished = Signal(object)  # GenerationResult
    failed = Signal(str)

    def __init__(self, make_engine: Callable[[], SpeculativeEngine], prompt_ids: list[int], config: GenerationConfig,
                 cancel: threading.Event):
        """make_engine is called in the worker's thread (building an engine is torch work, kept off the GUI
        thread: see ChatSession.engine_maker)."""
        super().__init__()
        self.make_engine, self.prompt_ids, self.config, self.cancel = make_engine, prompt_ids, config, cancel

    @Slot()
    def run(self) -> None:
        try:
            for event in self.make_engine().stream(self.prompt_ids, self.config, self.cancel):
                self.step.emit(event)
                if event.result is not None:
                    self.finished.emit(event.result)
        except Exception as error:  # reported in the window; the app stays usable
            log_unexpected(error)
            self.failed.emit(describe_failure(error))


class RaceWorker(QObject):
    """Runs a race's lanes one after the other (engine.race.RaceRunner) and reports each lane's steps."""

    step = Signal(int, object)  # lane, StepEvent
    lane_finished = Signal(int, object)  # lane, GenerationResult
    finished = Signal()
    failed = Signal(str)

    def __init__(self, runner, prompt_ids: list[int], drafters: list[str], config: GenerationConfig,
                 cancel: threading.Event):
        super().__init__()
        self.runner, self.prompt_ids, self.drafters, self.config, self.cancel = (
            runner, prompt_ids, drafters, config, cancel)

    @Slot()
    def run(self) -> None:
        try:
            for lane, event in self.runner.stream(self.prompt_ids, self.drafters, self.config, self.cancel):
                self.step.emit(lane, event)
                if event.result is not None:
                    self.lane_finished.emit(lane, event.result)
            self.finished.emit()
        except Exception as error:
            log_unexpected(error)
            self.failed.emit(describe_failure(error))


class CallWorker(QObject):
    """Runs one function in the background (model loading, calibration) and reports its value or failure."""

    done = Signal(object)
    failed = Signal(str)

    def __init__(self, function: Callable[[], object]):
        super().__init__()
        self.function = function

    @Slot()
    def run(self) -> None:
        try:
            self.done.emit(self.function())
        except Exception as error:
            log_unexpected(error)
            self.failed.emit(describe_failure(error))


class BackgroundThread:
    """A QThread owning one worker; quits when the worker reports, and can be waited for at shutdown."""

    def __init__(self, worker: QObject, end_signals: list):
        self.worker = worker
        self.thread = QThread()
        worker.moveToThread(self.thread)
        self.thread.started.connect(worker.run)
        for signal in end_signals:
            signal.connect(self.thread.quit)

    def start(self) -> None:
        self.thread.start()

    def is_running(self) -> bool:
        return self.thread.isRunning()

    def stop(self, timeout_ms: int = 10000) -> None:
        self.thread.quit()
        self.thread.wait(timeout_ms)
