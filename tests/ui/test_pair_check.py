"""The Settings dialog checks a pair off the GUI thread (issue 37: converting the offline pair's GGUF tokenizers
froze the window for half a minute), says "Checking the pair…" with what it is doing, and takes only the newest
check's verdict."""

import threading

from PySide6.QtCore import QTimer

from specchat.ui.settings import AppSettings, SettingsDialog
from specchat.ui.workers import JobThread

TICKS = 5  # 100 ms timer ticks the check waits for: it ends only if the GUI thread keeps running meanwhile


class SlowCheck:
    """A pair check made slow deterministically: after saying what it does, it waits until the GUI thread's timer
    has fired TICKS times (at most 30 s, so that a check run on the GUI thread fails instead of hanging)."""

    def __init__(self, verdict=(True, "Compatible")):
        self.verdict = verdict
        self.ticked = threading.Event()
        self.threads = []
        self.calls = []

    def __call__(self, target, draft):
        self.calls.append((target, draft))
        self.threads.append(threading.current_thread())
        yield "reading the target's tokenizer (1 of 3)"
        waited = self.ticked.wait(30)
        yield "comparing the tokenizers (3 of 3)"
        return self.verdict if waited else (False, "the GUI thread did not run while the check ran")


def ticking(count: list, check: SlowCheck) -> QTimer:
    timer = QTimer(interval=100)

    def tick():
        count.append(1)
        if len(count) >= TICKS:
            check.ticked.set()

    timer.timeout.connect(tick)
    timer.start()
    return timer


def test_a_slow_check_runs_off_the_gui_thread_and_says_so(qtbot, model_folders):
    check, ticks = SlowCheck(), []
    thread = JobThread("test-checks")
    timer = ticking(ticks, check)
    dialog = SettingsDialog(AppSettings(target=str(model_folders / "target"), drafter="model",
                                        draft=str(model_folders / "draft")), check, check_thread=thread)
    qtbot.addWidget(dialog)
    dialog.show()
    # The constructor returned at once: the check waits for the timer, which only this thread's loop can run.
    assert ticks == [] and dialog.compat.text().startswith("Checking the pair…")
    assert dialog.check_progress.isVisible() and not dialog.ok_button.isEnabled()
    qtbot.waitUntil(lambda: "reading the target's tokenizer (1 of 3)" in dialog.compat.text(), timeout=10000)
    qtbot.waitUntil(lambda: dialog.compat.text().startswith("✔"), timeout=30000)
    timer.stop()
    assert len(ticks) >= TICKS  # the 100 ms timer kept firing while the check ran
    assert dialog.compat.text() == "✔ Compatible" and dialog.ok_button.isEnabled()
    assert not dialog.check_progress.isVisible()
    assert check.threads and all(t is not threading.main_thread() for t in check.threads)
    assert thread.stop(timeout_ms=10000)


def test_only_the_newest_check_counts(qtbot, model_folders):
    slow, ticks = SlowCheck(verdict=(False, "the old pair")), []
    answers = {"old": slow}

    def check(target, draft):
        return answers[draft.rsplit("/", 1)[-1]](target, draft)

    answers["new"] = lambda target, draft: (True, "the new pair")
    dialog = SettingsDialog(AppSettings(target=str(model_folders / "target"), drafter="model", draft="/x/old"),
                            check)  # the dialog's own thread
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: "reading the target's tokenizer" in dialog.compat.text(), timeout=10000)
    dialog.draft.set_text("/x/new")
    dialog.recheck()  # queued behind the slow check, on the same thread
    timer = ticking(ticks, slow)
    qtbot.waitUntil(lambda: dialog.compat.text() == "✔ the new pair", timeout=30000)
    timer.stop()  # the old check ended first (one thread, in order): its verdict came and was dropped
    assert len(slow.calls) == 1 and dialog.compat.text() == "✔ the new pair" and dialog.ok_button.isEnabled()
    dialog.reject()  # closing drops checks still under way and ends the dialog's own thread
    assert dialog.pair_check.thread.stop(timeout_ms=10000)


def test_a_failing_check_is_a_verdict_not_a_crash(qtbot, model_folders):
    def broken(target, draft):
        raise RuntimeError("tokenizer exploded")

    dialog = SettingsDialog(AppSettings(target=str(model_folders / "target"), drafter="model",
                                        draft=str(model_folders / "draft")), broken)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.compat.text().startswith("✖"), timeout=10000)
    assert "tokenizer exploded" in dialog.compat.text() and not dialog.ok_button.isEnabled()
    dialog.reject()


def test_the_sessions_check_reports_its_steps_and_verdict(qtbot, store, tiny_pair, model_folders):
    from specchat.ui.session import ChatSession

    session = ChatSession(store, AppSettings(), pair=tiny_pair)
    steps = []
    dialog = SettingsDialog(AppSettings(target=str(model_folders / "target"), drafter="model",
                                        draft=str(model_folders / "draft")), session.check_pair,
                            check_thread=session.background)
    dialog.pair_check.progress.connect(steps.append)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.compat.text().startswith(("✔", "✖")), timeout=30000)
    assert steps == ["reading the target's tokenizer (1 of 3)", "reading the draft's tokenizer (2 of 3)",
                     "comparing the tokenizers (3 of 3)"]
    assert dialog.compat.text().startswith("✔ Compatible") and dialog.ok_button.isEnabled()
    session.shutdown()
