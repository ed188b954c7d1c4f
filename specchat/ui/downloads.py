"""Downloads of Hub models in the window: jobs on the session's download thread (one at a time, in the order
asked), each with its progress (bytes, a smoothed speed, the time left), Cancel, and what a cancelled download
kept for the next one (models/hub/snapshots.py continues unfinished files)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from PySide6.QtCore import QObject, Signal

from ..core.formatting import format_duration, format_size
from ..models.hub.snapshots import Progress
from .workers import FunctionWorker, JobThread

REPORT_EVERY_S = 0.2  # progress crosses to the GUI thread at most this often (a chunk arrives far more often)
ACTIVE = ("waiting", "downloading", "checking")


class TransferRate:
    """A download's speed, smoothed, and the time left at that speed.

    An exponential moving average of the rate between reports, weighted by the time each covers (half of the
    weight is on the last `half_life_s` seconds): one slow or fast chunk does not make the figure jump, and a real
    change of speed shows within a few seconds. When no bytes arrive (a stalled connection) the speed decays from
    `stall_after_s` on, so the time left grows instead of promising the old speed. No speed until `warm_up_s` of
    data: the first chunks arrive in a burst from buffers and would promise an ETA no one sees again."""

    def __init__(self, half_life_s: float = 3.0, warm_up_s: float = 1.0, stall_after_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.half_life_s, self.warm_up_s, self.stall_after_s, self.clock = half_life_s, warm_up_s, stall_after_s, clock
        self._first: float | None = None
        self._last: tuple[float, int] | None = None  # (time, bytes received by then)
        self._rate: float | None = None

    def update(self, received_bytes: int, at: float | None = None) -> None:
        """received_bytes: bytes received so far (a running total); at: when (the clock's time, default now)."""
        now = self.clock() if at is None else at
        if self._last is None:
            self._first, self._last = now, (now, received_bytes)
            return
        then, before = self._last
        elapsed = now - then
        if elapsed <= 0:
            return
        rate = max(received_bytes - before, 0) / elapsed
        weight = 1 - 0.5 ** (elapsed / self.half_life_s)
        self._rate = rate if self._rate is None else self._rate + weight * (rate - self._rate)
        self._last = (now, received_bytes)

    def speed(self) -> float | None:
        """Bytes per second now, or None while warming up."""
        if self._rate is None or self._last is None or self._last[0] - self._first < self.warm_up_s:
            return None
        idle = self.clock() - self._last[0] - self.stall_after_s
        return self._rate * 0.5 ** (max(idle, 0) / self.half_life_s)

    def seconds_left(self, remaining_bytes: int) -> float | None:
        speed = self.speed()
        return None if not speed else remaining_bytes / speed


@dataclass
class DownloadState:
    """One download as the window shows it."""

    repo_id: str
    status: str = "waiting"  # waiting, downloading, checking, done, cancelled, failed
    done_bytes: int = 0
    total_bytes: int = 0
    file: str = ""
    message: str = ""  # at the end: where it went, why it failed, or what was kept
    path: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    rate: TransferRate = field(default_factory=TransferRate)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def fraction(self) -> float | None:
        return self.done_bytes / self.total_bytes if self.total_bytes else None

    def describe(self, host: str = "huggingface.co") -> str:
        if self.status == "waiting":
            return "Waiting: another download comes first…"
        if self.status in ("done", "cancelled", "failed"):
            return self.message
        if not self.total_bytes:
            return f"Asking {host} for the list of files…"
        amount = f"{format_size(self.done_bytes)} of {format_size(self.total_bytes)}"
        if self.status == "checking":
            return f"{amount} · checking {self.file}…"
        speed, left = self.rate.speed(), self.rate.seconds_left(self.total_bytes - self.done_bytes)
        if speed is None:
            return f"{amount} · measuring the speed…"
        return f"{amount} · {format_size(speed)}/s · about {format_duration(left, estimate=True)} left"


class Downloads(QObject):
    """The session's downloads: start, cancel, and their states, for any dialog to show. `changed(repo_id)`
    whenever one moves; `ended(repo_id)` once each ends (done, cancelled or failed)."""

    changed = Signal(str)
    ended = Signal(str)
    _reported = Signal(str, object)  # (repo id, (time, Progress)) from the download thread, queued to this one

    def __init__(self, thread: JobThread, download: Callable | None = None):
        super().__init__()
        self.thread = thread
        self._download = download  # download(repo_id, on_progress, cancel) -> folder; None: download_from_hub
        self._states: dict[str, DownloadState] = {}
        self.watchers = 0  # dialogs showing the downloads now: a failure nobody watches goes to the window's banner
        self._reported.connect(self._on_progress)

    def state(self, repo_id: str) -> DownloadState | None:
        return self._states.get(repo_id)

    def start(self, repo_id: str) -> DownloadState:
        """Queues a download (or returns the one already under way for that model)."""
        repo_id = repo_id.strip()
        state = self._states.get(repo_id)
        if state is not None and state.active:
            return state
        state = self._states[repo_id] = DownloadState(repo_id)
        download = self._download or _download_from_hub
        last_sent = [0.0]

        def report(progress: Progress) -> None:  # on the download thread, for every chunk
            now = time.monotonic()
            if now - last_sent[0] >= REPORT_EVERY_S or progress.phase != "downloading" \
                    or progress.done_bytes >= progress.total_bytes:
                last_sent[0] = now
                self._reported.emit(repo_id, (now, progress))

        worker = FunctionWorker(lambda: download(repo_id, report, state.cancel), state.cancel)
        worker.started.connect(lambda: self._update(state, status="downloading"))
        worker.returned.connect(lambda path: self._end(state, "done", f"Downloaded to {path}", path))
        worker.errored.connect(lambda message: self._end(state, "cancelled", message) if state.cancel.is_set()
                               else self._end(state, "failed", f"Download failed: {message}"))
        self.thread.submit(worker)
        self.changed.emit(repo_id)
        return state

    def cancel(self, repo_id: str) -> None:
        """Stops the download at its next chunk (or before it starts); what arrived stays on disk."""
        state = self._states.get(repo_id)
        if state is not None and state.active:
            state.cancel.set()

    def _on_progress(self, repo_id: str, report: tuple[float, Progress]) -> None:
        state = self._states.get(repo_id)
        if state is None or not state.active:
            return
        at, progress = report
        state.rate.update(progress.received_bytes, at)
        self._update(state, status="checking" if progress.phase == "checking" else "downloading",
                     done_bytes=progress.done_bytes, total_bytes=progress.total_bytes, file=progress.file)

    def _update(self, state: DownloadState, **values) -> None:
        if state.active:
            for name, value in values.items():
                setattr(state, name, value)
            self.changed.emit(state.repo_id)

    def _end(self, state: DownloadState, status: str, message: str, path: str | None = None) -> None:
        state.status, state.message, state.path = status, message, path
        self.changed.emit(state.repo_id)
        self.ended.emit(state.repo_id)


def _download_from_hub(repo_id: str, on_progress, cancel) -> str:
    from ..models.hub.download import download_from_hub

    return download_from_hub(repo_id, on_progress, cancel)


class DownloadsLink(QObject):
    """How the Settings dialog reaches the session's downloads without knowing the session: the window routes the
    dialog's download_requested(hub_id) to ChatSession.download(hub_id, link), which attaches its Downloads here
    (an empty id only attaches). `attached` when it does."""

    attached = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.downloads: Downloads | None = None

    def attach(self, downloads: Downloads) -> None:
        if self.downloads is not downloads:
            self.downloads = downloads
            self.attached.emit()
