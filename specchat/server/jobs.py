"""One generation at a time on the device, the others waiting in a bounded line.

The model runs on one long-lived thread (torch's OpenMP keeps one team of threads per calling thread, so moving
generations between threads would slow them, as in the app: ui/workers.py). Requests are handled on the asyncio
loop; each gets a Job whose work runs on that thread and whose events come back through an asyncio queue. When
the line is full a request is refused at once (429) rather than left waiting for minutes; once the server is
closing, every new request gets 503.

A request takes its place (`admit`) before its prompt is tokenized, so the tokenizer's work is inside the same
limit: the line holds at most 1 + max_waiting requests, running, waiting or being prepared, and a request that
leaves while it is prepared gives its place back at once.
"""

from __future__ import annotations

import asyncio
import threading
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Callable


class LineFull(Exception):
    """Every place in the line is taken."""


class Closing(Exception):
    """The server is shutting down."""


@dataclass(frozen=True)
class Ended:
    """The last item of a job's events: its value, or the error that ended it."""

    value: object = None
    error: BaseException | None = None


class Job:
    """One request's generation: `work(job)` runs on the device thread and reports with job.put(item) (any number
    of times); the queue adds an Ended item last. `cancel` stops it, waiting or running."""

    def __init__(self, work: Callable[[Job], object], loop: asyncio.AbstractEventLoop):
        self.work = work
        self.cancel = threading.Event()
        self._loop = loop
        self.events: asyncio.Queue = asyncio.Queue()

    def put(self, item: object) -> None:
        """Called on the device thread: hands the item to the request's coroutine."""
        try:
            self._loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the loop has closed: nobody is listening any more
            pass


class Admission:
    """A request's place in the line from before its prompt is made: counted with the waiting jobs until it is
    submitted with its job, or released (the request failed, or its client went away). Use it as a context
    manager: the place is given back when the block ends, unless it was submitted."""

    def __init__(self, line: DeviceLine):
        self._line, self.held = line, True

    def release(self) -> None:
        """Gives the place back (once; nothing after submit)."""
        self._line._release(self)

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class DeviceLine:
    """Runs jobs one at a time on one thread, with at most `max_waiting` jobs waiting behind the running one.

    run_on_device, when given, is where each job's work actually runs: the app passes one that hands the work to
    its own model thread and waits for it, so the server's generations and the window's share one thread and one
    device, one at a time; the line's thread then only keeps the order. It is called as run_on_device(work,
    cancel) with the job's cancel event, and should give up waiting (raising Closing) once that is set before the
    work has started, so that closing never waits for a model thread busy with something else."""

    def __init__(self, max_waiting: int = 8, name: str = "specchat-serve-device",
                 run_on_device: Callable[[Callable[[], object], threading.Event], object] | None = None):
        self.max_waiting = max_waiting
        self.run_on_device = run_on_device
        self._name = name
        self._waiting: deque[Job] = deque()
        self._admitted = 0  # places taken by requests whose prompts are being made (Admission)
        self._running: Job | None = None
        self._lock = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None

    def admit(self) -> Admission:
        """A place for a request about to prepare its job (tokenize its prompt): LineFull when the line already
        holds 1 + max_waiting requests (running, waiting or admitted), Closing once the server closes."""
        with self._lock:
            if self._closing:
                raise Closing()
            if self._full():
                raise LineFull()
            self._admitted += 1
            return Admission(self)

    def _full(self) -> bool:
        return (self._running is not None) + len(self._waiting) + self._admitted >= 1 + self.max_waiting

    def _release(self, admission: Admission) -> None:
        with self._lock:
            if admission.held:
                admission.held = False
                self._admitted -= 1

    def submit(self, job: Job, admission: Admission | None = None) -> None:
        """Puts the job in the line, in the place `admission` holds (else in a free one: LineFull when there is
        none); Closing once the server closes."""
        with self._lock:
            if self._closing:
                raise Closing()
            if admission is not None and admission.held:
                admission.held = False
                self._admitted -= 1
            elif self._full():
                raise LineFull()
            self._waiting.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()
            self._lock.notify()

    def withdraw(self, job: Job) -> None:
        """The client went away: a waiting job leaves the line, a running one stops at its next step."""
        job.cancel.set()
        with self._lock:
            if job in self._waiting:
                self._waiting.remove(job)
                job.put(Ended(error=Closing()))

    def load(self) -> tuple[int, int]:
        """(running, waiting): the waiting count includes the requests whose prompts are being made."""
        with self._lock:
            return (self._running is not None), len(self._waiting) + self._admitted

    def close(self, timeout_s: float = 10.0) -> bool:
        """Refuses new jobs, cancels the waiting and the running one, and waits up to timeout_s (0: not at all) for
        the thread; True if it ended."""
        with self._lock:
            self._closing = True
            for job in self._waiting:
                job.cancel.set()
                job.put(Ended(error=Closing()))
            self._waiting.clear()
            if self._running is not None:
                self._running.cancel.set()
            self._lock.notify_all()
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._closing:
                    self._lock.wait()
                if self._closing:
                    return
                job = self._running = self._waiting.popleft()
            try:
                work = lambda job=job: job.work(job)  # noqa: E731 - bound now, run maybe elsewhere
                job.put(Ended(value=work() if self.run_on_device is None else self.run_on_device(work, job.cancel)))
            except Closing as error:  # cancelled before the model thread took it: a 503, not a crash
                job.put(Ended(error=error))
            except Exception as error:  # reported to the client as a 500 with its message; the line goes on
                traceback.print_exception(error)
                job.put(Ended(error=error))
            finally:
                with self._lock:
                    self._running = None
