"""Import and export from the window: every bad file gets a clear banner, nothing half-written, exports private."""

import json
import os
import stat
import threading

import pytest
from PySide6.QtCore import QTimer

from specchat.core.errors import StorageError


def choose_file(monkeypatch, path):
    from PySide6.QtWidgets import QFileDialog

    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), "JSON (*.json)"))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(path), ""))


def run_import(qtbot, window):
    """Imports the chosen file as the menu does, and waits until the outcome is on screen (it runs on the
    session's background thread)."""
    with qtbot.waitSignal(window.files.import_ended, timeout=30000):
        window.files.import_chat()


def export(conversation, created_at="2026-01-01T10:00:00+00:00"):
    return {"format": "specchat-conversation", "version": 1, "title": "Imported", "created_at": created_at,
            "messages": [{"role": "user", "text": "hi"}], **conversation}


@pytest.mark.parametrize("content, says", [
    ('{"messages": []}', "not a specchat conversation"),  # some other JSON
    ("[" * 100_000 + "]" * 100_000, "not valid JSON"),  # nested past the parser's recursion limit
    (json.dumps(export({}, created_at="0001-01-01T00:00:00+14:00")), '"created_at" must be an ISO 8601'),
    (json.dumps(export({"messages": [{"role": "user", "text": 5}]})), '"text" is missing or is not a string'),
    ("\udcff", "not valid JSON"),
])
def test_a_bad_import_shows_why_and_writes_nothing(qtbot, make_window, store, tmp_path, monkeypatch, content, says):
    window = make_window()
    path = tmp_path / "chat.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    choose_file(monkeypatch, path)
    run_import(qtbot, window)
    assert window.banner.isVisible() and says in window.banner.label.text()
    assert store.list_conversations() == []


def test_an_oversized_import_is_refused_before_it_is_read(qtbot, make_window, store, tmp_path, monkeypatch):
    from specchat.ui import session

    monkeypatch.setattr(session, "MAX_IMPORT_BYTES", 1000)
    window = make_window()
    path = tmp_path / "big.json"
    path.write_text(json.dumps(export({"messages": [{"role": "user", "text": "x" * 2000}]})))
    choose_file(monkeypatch, path)
    run_import(qtbot, window)
    assert "a specchat chat export is at most" in window.banner.label.text() and store.list_conversations() == []


def test_export_is_private_whole_and_reports_failures(qtbot, make_window, store, tmp_path, monkeypatch):
    window = make_window()
    window.conversation_id = store.create_conversation("Mine").id
    store.add_message(window.conversation_id, "user", "secret plans")
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "chat.json"
    path.write_text("an older file")
    choose_file(monkeypatch, path)
    window.files.export("json")
    assert json.loads(path.read_text())["messages"][0]["text"] == "secret plans"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["chat.json"]  # no temporary file left

    def failing(*args, **kwargs):
        raise StorageError("the chat database is locked by another program")

    monkeypatch.setattr(store, "export_json", failing)
    window.files.export("json")
    assert "Could not export" in window.banner.label.text() and "locked" in window.banner.label.text()
    assert json.loads(path.read_text())["messages"][0]["text"] == "secret plans"  # the earlier export is kept
    choose_file(monkeypatch, tmp_path / "no-such-folder" / "chat.md")
    window.files.export("md")
    assert "Could not export" in window.banner.label.text() and "No such file" in window.banner.label.text()


def test_a_huge_bad_value_is_quoted_only_in_part(qtbot, make_window, store, tmp_path, monkeypatch):
    """A 5 MB created_at once made a 5-million-character message, which the banner took seconds to lay out."""
    window = make_window()
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(export({}, created_at="9" * 5_000_000)))
    choose_file(monkeypatch, path)
    run_import(qtbot, window)
    text = window.banner.label.text()
    assert '"created_at" must be an ISO 8601 timestamp' in text and "(5,000,000 characters)" in text
    assert len(text) < 300 + len(str(path)) and store.list_conversations() == []


def test_an_import_runs_off_the_gui_thread_and_shows_how_far_it_is(qtbot, make_window, store, tmp_path,
                                                                    monkeypatch):
    """The import waits, on its thread, until a 100 ms timer on the GUI thread has fired five times: it ends only if
    the window's loop runs meanwhile (at most 30 s, so that an import on the GUI thread fails instead of hanging)."""
    from specchat.storage import exchange

    monkeypatch.setattr(exchange, "PROGRESS_EVERY", 2)  # a report every two messages: progress in a small file
    window = make_window()
    path = tmp_path / "chat.json"
    messages = [{"role": ("user", "assistant")[i % 2], "text": f"message {i}"} for i in range(5)]
    path.write_text(json.dumps(export({"messages": messages})))
    choose_file(monkeypatch, path)
    ticks, ticked, threads, shown = [], threading.Event(), [], []
    real_import = store.import_json

    def slow_import(data, on_progress=None):
        threads.append(threading.current_thread())
        waited = ticked.wait(30)
        assert waited, "the GUI thread did not run while the import ran"
        return real_import(data, on_progress)

    monkeypatch.setattr(store, "import_json", slow_import)
    window.statusBar().messageChanged.connect(shown.append)
    timer = QTimer(interval=100)
    timer.timeout.connect(lambda: (ticks.append(1), len(ticks) >= 5 and ticked.set()))
    timer.start()
    with qtbot.waitSignal(window.files.import_ended, timeout=30000):
        window.files.import_chat()
        assert shown == ["Importing chat.json: reading the file…"]  # at once, before any work is done
        window.files.import_chat()  # a second one waits for the first
        assert shown[-1] == "An import is under way: wait for it to end."
    timer.stop()
    assert len(ticks) >= 5 and threads and threads[0] is not threading.main_thread()
    assert "Importing chat.json: checking 2 of 5 messages…" in shown
    assert "Importing chat.json: saving 4 of 5 messages…" in shown
    assert "Importing chat.json: saving 5 of 5 messages…" in shown and shown[-1] == "Imported chat.json."
    assert window.banner.isHidden()
    document = window.transcript.toPlainText()
    assert all(f"message {i}" in document for i in range(5))  # the imported chat is open
    assert [c.title for c in store.list_conversations()] == ["Imported"]


def test_an_export_past_the_import_bound_is_compact_then_warns(qtbot, make_window, store, tmp_path, monkeypatch):
    from specchat.ui import session

    conversation = store.create_conversation("Long").id
    for n in range(40):
        store.add_message(conversation, "user" if n % 2 == 0 else "assistant", f"message {n} " + "x" * 40)
    window = make_window()
    indented = len(json.dumps(store.export_json(conversation), indent=1, ensure_ascii=False, default=str))
    compact = len(json.dumps(store.export_json(conversation), separators=(",", ":"), ensure_ascii=False,
                             default=str))
    path = tmp_path / "chat.json"
    monkeypatch.setattr(session, "MAX_IMPORT_BYTES", (indented + compact) // 2)
    assert window.session.export(conversation, str(path), "json") is None
    assert len(path.read_text()) == compact and "\n" not in path.read_text()  # compact, so it imports back
    assert store.import_json(path.read_bytes()).id != conversation
    monkeypatch.setattr(session, "MAX_IMPORT_BYTES", compact - 1)
    warning = window.session.export(conversation, str(path), "json")
    assert "more than the" in warning and "specchat cannot import it" in warning
    assert json.loads(path.read_text())["title"] == "Long"  # complete all the same
