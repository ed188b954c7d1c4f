"""Documents' tokens in the window are counted off the GUI thread (issue 45's review): a stored document without a
count, the passages of a chat read as passages, and the chips after a model change are counted on the session's
background thread, the meter and the chips saying "counting tokens…" until the counts are in; and a reply's copied
spans keep their sources ("from memo.txt") from one drawing of the chat to the next, computed once."""

import threading
from dataclasses import replace
from pathlib import Path

import torch
from PySide6.QtGui import QTextCursor

from specchat.chats import copy_sources
from specchat.chats.context_plan import COUNTING
from specchat.documents.reading import read_document
from specchat.engine.chat_engine import PromptFitter
from specchat.engine.loading.load import LoadedModel
from specchat.engine.loading.pair import ModelPair
from specchat.models.sources import ModelSource
from specchat.ui.attachments import texts_to_count

COUNT_TIMEOUT = 60000


class ThreadsSeen:
    """The real tokenizer, with the thread and the text of each call to it recorded."""

    def __init__(self, real):
        self.real = real
        self.calls: list[tuple[int, str]] = []

    def __call__(self, text, **options):
        self.calls.append((threading.get_ident(), text))
        return self.real(text, **options)

    def __getattr__(self, name):
        return getattr(self.real, name)

    def on_the_gui_thread(self) -> list[str]:
        main = threading.main_thread().ident
        return [text for ident, text in self.calls if ident == main]


def model_with_tokenizer(window, tokenizer, positions: int = 4096) -> None:
    """A model change: the window's pair swapped for a tiny model with `tokenizer` and a context window of
    `positions` (the fixture's 512 holds less than one passage of the byte tokenizer)."""
    from tiny_models import build_tiny_llama

    model = build_tiny_llama(len(tokenizer.real), seed=0, max_positions=positions)
    loaded = LoadedModel(ModelSource("folder", "tiny-other"), model, tokenizer, torch.device("cpu"), torch.float32)
    window.session.pair = ModelPair(loaded, loaded)
    window.session.status_changed.emit()


def long_document(tmp_path: Path):
    """A 115 KB text file read as specchat reads it: far longer than the tiny model's window."""
    path = tmp_path / "archive.txt"
    path.write_text(" ".join(f"Line {i}: the archive keeps letters from {1900 + i % 100} and notes."
                             for i in range(2000)), encoding="utf-8")
    return path, read_document(path)


def counted(qtbot, window) -> None:
    """Waits until the background counts are in and the meter took them."""
    attachments = window.attachments
    qtbot.waitUntil(lambda: attachments.count_job is None and attachments.meter.meter is not None
                    and not attachments.meter.meter.counting, timeout=COUNT_TIMEOUT)


def assert_document_counted_off_the_gui_thread(watched: ThreadsSeen, document) -> None:
    texts = set(texts_to_count(document))
    assert not [t for t in watched.on_the_gui_thread() if t in texts or len(t) > 1000], "counted on the GUI thread"
    assert any(text == document.text for _, text in watched.calls)  # counted, on the background thread


def test_a_stored_document_without_a_count_is_counted_off_the_gui_thread(qtbot, make_window, tmp_path):
    window = make_window()
    _, document = long_document(tmp_path)
    conversations = window.conversations
    chat = conversations.open(conversations.start("Which letters?").id)
    conversations.ask(chat, "Which letters are from 1931?", [document])  # stored without a token count
    real = window.session.tokenizer
    watched = ThreadsSeen(real)
    model_with_tokenizer(window, watched)  # nothing counted yet under this tokenizer
    window.open_conversation(chat.conversation_id)
    meter = window.attachments.meter
    assert meter.meter.counting and meter.summary.text().endswith(COUNTING)
    counted(qtbot, window)
    assert_document_counted_off_the_gui_thread(watched, document)
    assert COUNTING not in meter.summary.text() and "archive.txt is too long to read whole" in meter.warning.text()
    exact = window.chat.plan(PromptFitter(real, meter.meter.window), window.session.settings.max_new_tokens,
                             conversations.search_for(chat.conversation_id), typed="").meter
    exact = replace(exact, message=0)  # nothing typed: the meter counts no turn's markers for it
    assert meter.meter == exact and exact.documents > 0 and exact.as_passages == ("archive.txt",)

    again = ThreadsSeen(real)
    model_with_tokenizer(window, again)  # the chat open: the meter measures it with the new model
    qtbot.waitUntil(lambda: window.attachments.count_job is not None, timeout=COUNT_TIMEOUT)
    counted(qtbot, window)
    assert_document_counted_off_the_gui_thread(again, document)
    assert meter.meter == exact


def test_after_a_model_change_a_chip_says_counting_until_its_count_is_in(qtbot, make_window, tmp_path):
    from test_attachments import chip_texts, drop_on_window

    window = make_window()
    path, document = long_document(tmp_path)
    drop_on_window(qtbot, window, [path])
    tokens = len(window.session.tokenizer(document.text, add_special_tokens=False)["input_ids"])
    assert chip_texts(window) == [f"archive.txt · {tokens:,} tokens"]  # counted as it was read
    watched = ThreadsSeen(window.session.tokenizer)
    model_with_tokenizer(window, watched)
    assert chip_texts(window) == [f"archive.txt · {COUNTING}"]
    counted(qtbot, window)
    assert chip_texts(window) == [f"archive.txt · {tokens:,} tokens"]
    assert window.attachments.pending[0].tokens == tokens
    assert_document_counted_off_the_gui_thread(watched, document)


def tooltip_at(transcript, text: str) -> str:
    body = transcript.document().toPlainText()
    cursor = QTextCursor(transcript.document())
    cursor.setPosition(body.index(text) + 3)
    return cursor.charFormat().toolTip()


def test_a_replys_copied_sources_are_computed_once_across_full_redraws(qtbot, make_window, store, tmp_path,
                                                                       monkeypatch):
    computed = []

    def counting(reply, spans, documents):
        computed.append(reply)
        return span_sources(reply, spans, documents)

    span_sources = copy_sources.span_sources
    monkeypatch.setattr(copy_sources, "span_sources", counting)
    window = make_window()
    memo = tmp_path / "memo.txt"
    memo.write_text("Terms: the warranty lasts five years from purchase. Returns within thirty days.")
    conversations = window.conversations
    chat = conversations.open(conversations.start("How long?").id)
    conversations.ask(chat, "How long is the warranty?", [read_document(memo)])
    reply = "It says the warranty lasts five years. Good."
    message = store.add_message(chat.conversation_id, "assistant", reply,
                                spans=[[0, 8, "target"], [8, 38, "draft"], [38, 44, "target"]])
    window.open_conversation(chat.conversation_id)
    first = tooltip_at(window.transcript, "warranty lasts")
    assert first.endswith("\nfrom memo.txt") and len(computed) == 1
    window.transcript.set_messages(window._views())  # a full redraw of the open chat
    window.open_conversation(chat.conversation_id)  # the chat read again and drawn anew
    assert tooltip_at(window.transcript, "warranty lasts") == first
    assert len(computed) == 1

    continued = reply + " Returns within thirty days."  # the reply went on: its spans changed
    store.update_message(message.id, text=continued,
                         spans=[[0, 8, "target"], [8, 38, "draft"], [38, 44, "target"], [44, 72, "draft"]])
    window.open_conversation(chat.conversation_id)
    assert len(computed) == 2 and tooltip_at(window.transcript, "thirty days").endswith("\nfrom memo.txt")
    assert tooltip_at(window.transcript, "warranty lasts") == first
