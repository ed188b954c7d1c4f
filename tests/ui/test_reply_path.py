"""A chat reply's path from Enter to its rows, counted on the real Store (SQLite in a temporary folder) and the real
transcript, on the tiny model: each reply fits its prompt once, only what changed is drawn (the reply once more as
it ends, not the whole chat: issue 46), nothing the reply wrote is read back (its footer included), and opening a
chat is one read and no write."""

import re
from collections import Counter

import pytest
from store_calls import count_calls

STREAM_TIMEOUT = 120000  # generous: a loaded CI machine is slow, and a hang still fails
READS = ("messages", "chat", "conversation", "run_for_message")  # what would read a chat's rows back
WRITES = ("add_message", "update_message", "save_partial_reply", "record_run", "update_run", "delete_run",
          "include_in_history", "ask")


@pytest.fixture
def counted(store, monkeypatch):
    """Every call to the Store's chat reads and writes, and every write transaction, by name, in order."""
    return count_calls(store, READS + WRITES + ("_writing",), monkeypatch)


@pytest.fixture
def fits(monkeypatch):
    """Every prompt fitted to the context window (engine.chat_engine.PromptFitter.fit's one fitting call)."""
    import specchat.engine.chat_engine as chat_engine

    fitted = []
    real = chat_engine.build_fitting_prompt

    def fit(tokenizer, history, system, budget):
        fitted.append(len(history))
        return real(tokenizer, history, system, budget)

    monkeypatch.setattr(chat_engine, "build_fitting_prompt", fit)
    return fitted


def drawn(window):
    """What the transcript draws, in order: "all" for a whole-chat render, "one" for a message drawn on its own,
    "|" where the ended reply is handed to it (Transcript.end_reply)."""
    log = []
    transcript = window.transcript
    render_all, append, end_reply = transcript._render_all, transcript._append_message, transcript.end_reply

    def render_everything():
        log.append("all")
        render_all()

    def append_one(message, is_last):
        log.append("one")
        append(message, is_last)

    def ended(message):
        log.append("|")
        end_reply(message)

    transcript._render_all, transcript._append_message, transcript.end_reply = render_everything, append_one, ended
    return log


def reply(qtbot, window, text, calls, fits, log):
    """Sends `text` and waits for the reply; returns what the reply did: the Store calls, the prompts fitted and
    the drawing."""
    for record in (calls, fits, log):
        record.clear()
    window.composer.setPlainText(text)
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()
    return Counter(calls), list(fits), list(log)


def test_a_reply_fits_once_draws_the_chat_once_and_reads_nothing_back(qtbot, make_window, store, counted, fits):
    window = make_window(drafter="model", max_new_tokens=24)
    log = drawn(window)

    for text, earlier in (("The quick brown fox", 0), ("And then?", 2)):  # a new chat, then the same chat again
        calls, fitted, drawing = reply(qtbot, window, text, counted, fits, log)
        assert fitted == [earlier + 1]  # one prompt fitted, of the chat's messages with the one just sent
        assert not any(calls[name] for name in READS)  # nothing written is read back: no messages, no footer
        assert calls["ask"] == 1 and calls["add_message"] == 1  # the message (with its documents), the placeholder
        assert calls["record_run"] == 1  # and its run
        assert calls["update_message"] == 1 and calls["update_run"] == 1  # the finished reply and its run
        assert calls["include_in_history"] == 0 and calls["delete_run"] == 0
        # drawn: the message just sent (and the earlier reply, whose Regenerate link goes), then, once the reply
        # has ended, the reply alone in place of its streamed text (what is before it stays as drawn)
        assert drawing == ["one"] * (2 if earlier else 1) + ["|", "one"]

    messages = store.messages(window.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert all(m.text and m.finish_reason == "length" for m in messages[1::2])
    # what the window drew from memory is what the chat shows when it is read back from the database
    shown = re.sub(r"key=\w+", "", window.transcript.document().toHtml())
    footers = [window.session.run_footer(m.id) for m in messages[1::2]]
    assert all(footer and footer in window.transcript.toPlainText() for footer in footers)
    counted.clear()
    window.open_conversation(window.conversation_id)
    assert Counter(counted) == {"chat": 1}  # opening a chat: one read, footers included, and no write transaction
    assert re.sub(r"key=\w+", "", window.transcript.document().toHtml()) == shown


def test_regenerating_reads_the_chat_once_before_it_writes(qtbot, make_window, store, counted, fits):
    window = make_window(drafter="pld", max_new_tokens=16)
    log = drawn(window)
    reply(qtbot, window, "The quick brown fox", counted, fits, log)
    counted.clear(), fits.clear(), log.clear()
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.regenerate()
    assert counted[0] == "chat" and counted.count("chat") == 1  # read once, first (a system prompt may have changed)
    assert not any(counted.count(name) for name in ("messages", "conversation", "run_for_message"))
    assert fits == [1] and log == ["|", "one"]  # one fit; the new reply drawn once as it ended, nothing else
    assert [m.role for m in store.messages(window.conversation_id)] == ["user", "assistant"]


def test_an_imported_chat_writes_once_when_first_opened_and_never_again(qtbot, make_window, store, counted):
    imported = store.import_json({"format": "specchat-conversation", "version": 1, "title": "From elsewhere",
                                  "messages": [{"role": "user", "text": "q"}, {"role": "assistant", "text": "a"}]})
    window = make_window(drafter="pld")
    counted.clear()
    window.open_conversation(imported.id)
    assert Counter(counted) == {"chat": 1, "include_in_history": 1, "_writing": 1}  # now seen: joins the history
    counted.clear()
    window.open_conversation(imported.id)
    assert Counter(counted) == {"chat": 1}
