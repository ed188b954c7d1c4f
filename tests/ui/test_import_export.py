"""Import and export from the window: every bad file gets a clear banner, nothing half-written, exports private."""

import json
import os
import stat

import pytest

from specchat.storage import StorageError


def choose_file(monkeypatch, path):
    from PySide6.QtWidgets import QFileDialog

    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), "JSON (*.json)"))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(path), ""))


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
    window._import()
    assert window.banner.isVisible() and says in window.banner.label.text()
    assert store.list_conversations() == []


def test_an_oversized_import_is_refused_before_it_is_read(qtbot, make_window, store, tmp_path, monkeypatch):
    from specchat.ui import session

    monkeypatch.setattr(session, "MAX_IMPORT_BYTES", 1000)
    window = make_window()
    path = tmp_path / "big.json"
    path.write_text(json.dumps(export({"messages": [{"role": "user", "text": "x" * 2000}]})))
    choose_file(monkeypatch, path)
    window._import()
    assert "a specchat chat export is at most" in window.banner.label.text() and store.list_conversations() == []


def test_export_is_private_whole_and_reports_failures(qtbot, make_window, store, tmp_path, monkeypatch):
    window = make_window()
    window.conversation_id = store.create_conversation("Mine").id
    store.add_message(window.conversation_id, "user", "secret plans")
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "chat.json"
    path.write_text("an older file")
    choose_file(monkeypatch, path)
    window._export("json")
    assert json.loads(path.read_text())["messages"][0]["text"] == "secret plans"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["chat.json"]  # no temporary file left

    def failing(*args, **kwargs):
        raise StorageError("the chat database is locked by another program")

    monkeypatch.setattr(store, "export_json", failing)
    window._export("json")
    assert "Could not export" in window.banner.label.text() and "locked" in window.banner.label.text()
    assert json.loads(path.read_text())["messages"][0]["text"] == "secret plans"  # the earlier export is kept
    choose_file(monkeypatch, tmp_path / "no-such-folder" / "chat.md")
    window._export("md")
    assert "Could not export" in window.banner.label.text() and "No such file" in window.banner.label.text()
