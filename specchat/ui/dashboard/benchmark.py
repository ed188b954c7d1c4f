"""The dashboard's benchmark: the dialog that asks which prompts to measure, and the code that runs them on the
session's model thread, shows the progress and stores the results as benchmark runs (BenchmarkHost, the benchmark
half of DashboardWindow)."""

from __future__ import annotations

import html
import threading
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import (QButtonGroup, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QFrame, QHBoxLayout,
                               QLabel, QLineEdit, QProgressBar, QPushButton, QRadioButton, QSpinBox, QVBoxLayout,
                               QWidget)

from ...bench.report import bench_run_values
from ...bench.runner import BenchRunner, BenchSettings
from ...bench.suites import load_prompts
from ...core.errors import PromptError, SpecchatError, StorageError
from ...core.run_kind import REMOTE, RunKind
from ...core.vocabulary import PLAIN, drafter_kind
from ...engine.loading.pair import ModelPair
from ...resources import default_prompt_suite
from ..workers import FunctionWorker
from .stats import _count

BENCH_DEVICE_USER = "bench"
DEFAULT_BENCH_PROMPTS = 8  # a quick run; 0 = the whole file
DEFAULT_BENCH_TOKENS = 128


class BenchmarkProgress(QObject):
    """Carries the runner's progress from its thread to the window (a queued signal, so thread safe)."""

    progress = Signal(int, int, str)  # prompt-modes done, in all, what was just measured


@dataclass
class BenchmarkRun:
    """A running benchmark: what the results are stored with, and how to stop it."""

    worker: FunctionWorker  # runs on the session's model thread
    cancel: threading.Event
    pair: ModelPair  # the pair it measures (the session may load another meanwhile)
    settings: BenchSettings
    modes: list[str]
    records: list | None = None  # set by the worker thread when the runner returns
    remote_name: str | None = None  # the remote engine of the "remote" mode, when the chat uses one


def _suite_description() -> str:
    try:
        prompts = load_prompts(*_prompt_lines(None))
    except SpecchatError:  # a damaged install: the benchmark itself will say what is wrong
        return "Spec-Bench format"
    return f"{len(prompts)} prompts in {len({p.category for p in prompts})} categories"


def benchmark_modes(drafter: str, remote: bool = False) -> list[str]:
    """Plain decoding (the baseline of every speedup), the drafter chosen in Settings, and the remote engine the
    chat uses, if any (API menu)."""
    return ([PLAIN] if RunKind.parse(drafter).is_plain else [PLAIN, drafter]) + ([REMOTE] if remote else [])


class BenchmarkDialog(QDialog):
    """Which prompts, how many, and how long the replies may be."""

    def __init__(self, modes: list[str], where: str, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Run a benchmark — specchat")
        names = " and ".join("the remote engine (another machine: compared for text, not speed)"
                             if RunKind.parse(m).is_remote else drafter_kind(m).phrase for m in modes)
        intro = QLabel(f"Each prompt is decoded greedily with <b>{html.escape(names)}</b>, one after the other on "
                       f"<b>{html.escape(where)}</b>. The speedup is measured against plain decoding of the same "
                       "prompt; the results are stored as benchmark runs.")
        intro.setWordWrap(True)
        self.suite = QRadioButton(f"Shipped prompt suite ({_suite_description()})")
        self.file = QRadioButton("Your JSONL file in Spec-Bench format:")
        self.suite.setChecked(True)
        choice = QButtonGroup(self)
        choice.addButton(self.suite)
        choice.addButton(self.file)
        self.path = QLineEdit(placeholderText="prompts.jsonl")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        file_row = QHBoxLayout()
        file_row.setContentsMargins(24, 0, 0, 0)
        file_row.addWidget(self.path, 1)
        file_row.addWidget(browse)
        self.limit = QSpinBox(minimum=0, maximum=100_000, value=DEFAULT_BENCH_PROMPTS)
        self.limit.setSpecialValueText("all")
        self.limit.setToolTip("The first N prompts of the file; 0 = all of them")
        self.max_tokens = QSpinBox(minimum=8, maximum=4096, value=DEFAULT_BENCH_TOKENS, singleStep=32)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        form.addRow("Prompts:", self.limit)
        form.addRow("Max tokens per reply:", self.max_tokens)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Run benchmark")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.path.textEdited.connect(lambda: self.file.setChecked(True))
        for signal in (self.file.toggled, self.path.textChanged):
            signal.connect(self._update_ok)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addSpacing(6)
        layout.addWidget(self.suite)
        layout.addWidget(self.file)
        layout.addLayout(file_row)
        layout.addLayout(form)
        layout.addWidget(self.buttons)
        self.setMinimumWidth(540)

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Prompts in Spec-Bench format", "",
                                              "JSON Lines (*.jsonl *.json);;All files (*)")
        if path:
            self.path.setText(path)
            self.file.setChecked(True)

    def _update_ok(self) -> None:
        ok = not self.file.isChecked() or bool(self.path.text().strip())
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(ok)

    def choice(self) -> tuple[str | None, int, int]:
        """(prompts file or None for the shipped suite, prompt limit (0 = all), max new tokens)."""
        path = self.path.text().strip() if self.file.isChecked() else None
        return path or None, self.limit.value(), self.max_tokens.value()


def _prompt_lines(path: str | Path | None) -> tuple[list[str], str]:
    """The prompt file's lines and how to name it in messages; the shipped suite when `path` is None."""
    if path is None:
        return default_prompt_suite().read_text(encoding="utf-8").splitlines(), "the shipped suite"
    try:
        return Path(path).read_text(encoding="utf-8").splitlines(), Path(path).name
    except (OSError, UnicodeDecodeError) as error:
        raise PromptError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from error


class BenchmarkHost(QWidget):
    """The benchmark half of DashboardWindow, its base class: the panel, and starting, following, cancelling and
    storing a run. It uses the window's session, _benchmark, _bench_progress, _say and _update_actions.

    A QWidget subclass rather than a plain mixin: PySide6 then connects the worker's signals to these slots through
    the meta-object, so that sender() names the worker in _reporting_run (from a mixin it returned None)."""

    benchmark_finished = Signal()  # the benchmark ended (stored, cancelled or failed) and the device is free

    def _build_bench_panel(self) -> QFrame:
        self.bench_panel = QFrame(objectName="card")
        self.bench_label = QLabel("<b>Benchmark</b>")
        self.bench_bar = QProgressBar()
        self.bench_bar.setTextVisible(True)
        self.bench_cancel = QPushButton("Cancel")
        self.bench_cancel.setToolTip("Stop after the prompt being measured; the finished prompts are stored")
        self.bench_cancel.clicked.connect(self.cancel_benchmark)
        layout = QHBoxLayout(self.bench_panel)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.bench_label)
        layout.addWidget(self.bench_bar, 1)
        layout.addWidget(self.bench_cancel)
        self.bench_panel.hide()
        return self.bench_panel

    def benchmark_running(self) -> bool:
        return self._benchmark is not None

    def _benchmark_problem(self) -> str | None:
        """Why a benchmark cannot start now, or None."""
        session = self.session
        if self._benchmark is not None:
            return "A benchmark is already running."
        if not session.ready:
            return "The models are still loading; run the benchmark when they are ready."
        if session.device_busy():
            return ("The models are busy (a chat reply or a race is being generated); run the benchmark when it "
                    "has finished.")
        drafter = drafter_kind(session.settings.drafter)
        if drafter.needs_model and not session.pair.has_draft:
            return f"The {drafter.chart_label} drafter needs a draft model: choose one in Settings."
        if drafter.needs_head and not session.pair.has_head:
            return f"The {drafter.chart_label} drafter needs a draft head for this target."
        return None

    def open_benchmark_dialog(self) -> None:
        problem = self._benchmark_problem()
        if problem:
            self._say(problem, "error")
            return
        dialog = BenchmarkDialog(benchmark_modes(self.session.settings.drafter, self.session.remote is not None),
                                 str(self.session.pair.target.device), self)
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self.start_benchmark(*dialog.choice())

    def start_benchmark(self, prompts_path: str | Path | None = None, limit: int = DEFAULT_BENCH_PROMPTS,
                        max_new_tokens: int = DEFAULT_BENCH_TOKENS) -> bool:
        """Run the benchmark in the background (prompts_path None: the shipped suite; limit 0: every prompt).
        False, with a message in the window, when it cannot start."""
        problem = self._benchmark_problem()
        if problem:
            self._say(problem, "error")
            return False
        try:
            lines, source = _prompt_lines(prompts_path)
            prompts = load_prompts(lines, source, limit or None)
        except SpecchatError as error:
            self._say(f"The benchmark cannot start: {error}", "error")
            return False
        session = self.session
        settings = BenchSettings(k=session.settings.k, adaptive=session.settings.adaptive_k,
                                 max_new_tokens=max_new_tokens, repeats=1)
        remote = session.remote
        modes = benchmark_modes(session.settings.drafter, remote is not None)
        runner = BenchRunner(session.pair, settings, remote=remote.engine if remote is not None else None)
        self._launch_benchmark(runner, prompts, modes, settings, remote.info.name if remote is not None else None)
        return True

    def _launch_benchmark(self, runner, prompts, modes: list[str], settings, remote_name: str | None = None) -> None:
        cancel = threading.Event()
        report = self._bench_progress.progress.emit

        def progress(done: int, total: int, record) -> None:  # called on the worker thread
            mode = drafter_kind(record.mode).chart_label
            report(done, total, f"q{record.question_id} {record.category} · {mode}")

        def work():
            bench.records = runner.run(prompts, modes, progress=progress, cancel=cancel)
            return bench.records

        worker = FunctionWorker(work, cancel, if_not_run=[])  # also cancelled when the session shuts down
        bench = BenchmarkRun(worker, cancel, self.session.pair, settings, modes, remote_name=remote_name)
        # Bound methods of this window (not lambdas): Qt then queues the calls to the GUI thread.
        worker.returned.connect(self._on_benchmark_done)
        worker.errored.connect(self._on_benchmark_failed)
        self._benchmark = bench
        self.session.claim_device(BENCH_DEVICE_USER)
        self.bench_bar.setRange(0, len(prompts) * len(modes))
        self.bench_bar.setValue(0)
        self.bench_bar.setFormat(f"warming up · {len(prompts)} prompts × {len(modes)} modes")
        self.bench_cancel.setEnabled(True)
        self.bench_panel.show()
        self._say("")
        self._update_actions()
        self.session.model_thread.submit(worker)

    @Slot(int, int, str)
    def _on_benchmark_progress(self, done: int, total: int, what: str) -> None:
        if self._benchmark is None:  # a late report after the window closed the run
            return
        self.bench_bar.setRange(0, total)
        self.bench_bar.setValue(done)
        self.bench_bar.setFormat(f"{done} / {total} · {what}")

    def cancel_benchmark(self) -> None:
        """Stop after the prompt-mode being measured; the prompts finished in every mode are stored."""
        if self._benchmark is not None:
            self._benchmark.cancel.set()
            self.bench_cancel.setEnabled(False)
            self.bench_bar.setFormat(self.bench_bar.format() + " · cancelling…")

    def _reporting_run(self) -> BenchmarkRun | None:
        """The running benchmark if it is the one whose worker reports (not one that closeEvent already ended)."""
        bench = self._benchmark
        return bench if bench is not None and self.sender() is bench.worker else None

    @Slot(object)
    def _on_benchmark_done(self, records: list) -> None:
        if self._reporting_run() is not None:
            self._finish_benchmark(records)

    @Slot(str)
    def _on_benchmark_failed(self, message: str) -> None:
        if self._reporting_run() is None:
            return
        self._end_benchmark()
        self._say(f"The benchmark failed: {message}", "error")
        self.benchmark_finished.emit()

    def _finish_benchmark(self, records: list) -> None:
        bench = self._benchmark
        cancelled = bench.cancel.is_set()
        self._end_benchmark()
        try:
            stored = self._store_benchmark(bench, records)
        except StorageError as error:
            self._say(f"The benchmark ran but its runs could not be stored: {error}", "error")
            self.benchmark_finished.emit()
            return
        prompts = len({r.question_id for r in records})
        if stored:
            self.session.stats_changed.emit()  # the dashboard and the main window's figures refresh
        if cancelled and not prompts:
            self._say("Benchmark cancelled before a prompt finished in every mode: nothing stored.")
        else:
            self._say(f"Benchmark{' cancelled' if cancelled else ''}: {_count(prompts, 'prompt')} × "
                      f"{_count(len(bench.modes), 'mode')} stored", "success")
        self.benchmark_finished.emit()

    def _store_benchmark(self, bench: BenchmarkRun, records: list) -> int:
        stored = 0
        for record in records:
            values = bench_run_values(record, bench.pair, bench.settings, self.session.app_session_id,
                                      bench.remote_name)
            if values is not None:
                self.session.runs.add(values)
                stored += 1
        return stored

    def _end_benchmark(self) -> None:
        bench, self._benchmark = self._benchmark, None
        if bench is not None:
            self.session.release_device(BENCH_DEVICE_USER)
        self.bench_panel.hide()
        self._update_actions()
