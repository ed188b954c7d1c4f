"""Storage faults during and after a reply, injected into the window's Store: what the user sees, what is kept.
(test_storage_faults.py has the same faults raised by SQLite itself, on a real file.)

In every case the window is usable afterwards (sidebar, Send, no device claim left), the reply stays on screen,
and a banner says what happened."""

from specchat.core.errors import StorageError

STREAM_TIMEOUT = 120000


def send(qtbot, window, text):
    window.composer.setPlainText(text)
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()


def usable(window):
    return (window.active is None and window.conversation_list.isEnabled() and window.send_button.isVisibleTo(window)
            and not window.stop_button.isVisibleTo(window) and not window.session.device_busy())


def failing_writes(monkeypatch, store, names, error="database or disk is full"):
    """The named methods of `store` (a Store or the session's RunBook) raise StorageError; the calls they got."""
    calls = []

    def fail(*args, **kwargs):
        calls.append(args)
        raise StorageError(f"could not save: {error}")

    for name in names.split():
        monkeypatch.setattr(store, name, fail)
    return calls


def test_a_disk_full_while_streaming_is_said_once_and_the_finished_reply_stays_on_screen(
        qtbot, make_window, store, monkeypatch):
    from specchat.chats import reply_controller

    monkeypatch.setattr(reply_controller, "SAVE_PARTIAL_S", 0.0)  # a partial save at every frame that has steps
    window = make_window(drafter="model", max_new_tokens=40)
    calls = failing_writes(monkeypatch, store, "update_message save_partial_reply")
    send(qtbot, window, "The quick brown fox")
    assert usable(window)
    text = window.transcript.document().toPlainText()
    assert "not saved" in text and "could not be saved" in window.banner.label.text()
    assert "database or disk is full" in window.banner.label.text()
    reply = [m for m in store.messages(window.conversation_id) if m.role == "assistant"][0]
    assert reply.text == "" and reply.stopped  # what is kept: the placeholder written when the reply began
    assert len(calls) >= 2  # partial saves and the final one were all tried...
    send(qtbot, window, "Again")  # ...and the window goes on working
    assert usable(window)


def test_a_failed_statistics_write_frees_the_window(qtbot, make_window, store, monkeypatch):
    window = make_window()
    failing_writes(monkeypatch, window.session.runs, "complete", "database is locked")
    send(qtbot, window, "The quick brown fox")
    assert usable(window) and "database is locked" in window.banner.label.text()
    reply = [m for m in store.messages(window.conversation_id) if m.role == "assistant"][0]
    assert reply.text and reply.finish_reason  # the reply itself was saved before the statistics failed


def test_a_failure_after_the_engine_failed_still_frees_the_window(qtbot, make_window, store, monkeypatch):
    from specchat.ui import reply_workers

    window = make_window()
    failing_writes(monkeypatch, store, "update_message", "the chat was deleted by another specchat")

    def exploding_engine(self):
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(reply_workers.GenerationWorker, "run", exploding_engine)
    window.composer.setPlainText("The quick brown fox")
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()
    assert usable(window)
    banner = window.banner.label.text()
    assert "engine exploded" in banner and "could not be saved" in banner and "deleted by another" in banner


def test_a_message_the_database_refuses_stays_in_the_box(qtbot, make_window, store, monkeypatch):
    window = make_window()
    original = store.ask  # the user's message and its documents, in one write
    calls = failing_writes(monkeypatch, store, "ask", "database is locked")
    window.composer.setPlainText("Please remember this")
    window.send()
    assert calls and usable(window)
    assert window.composer.toPlainText() == "Please remember this"  # nothing typed is lost
    assert "could not be saved" in window.banner.label.text() and "locked" in window.banner.label.text()
    monkeypatch.setattr(store, "ask", original)  # the lock is gone: the same message goes through
    send(qtbot, window, window.composer.toPlainText())
    assert [m.text for m in store.messages(window.conversation_id) if m.role == "user"] == ["Please remember this"]
    assert window.banner.isHidden()  # the refusal is over
