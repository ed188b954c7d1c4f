"""The terminal chat (used without a display): commands, streaming replies, coloured draft spans on a tty."""

import io

import torch

from specchat.commands.terminal import DRAFT_STYLE, RESET, StreamPrinter, TerminalChat
from specchat.core.vocabulary import Origin
from specchat.engine.decoding.events import GenerationStats, StepEvent
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.loading.load import LoadedModel
from specchat.engine.loading.pair import ModelPair
from specchat.models.sources import ModelSource


def test_chat_session_in_the_terminal(tokenizer, target):
    loaded = LoadedModel(ModelSource("folder", "tiny"), target, tokenizer, torch.device("cpu"), torch.float32)
    commands = io.StringIO("/help\nThe quick brown fox\n/drafter turbo\n/drafter none\n/new\nhello\n/quit\n")
    out = io.StringIO()
    chat = TerminalChat(ModelPair(loaded, loaded), "model", GenerationConfig(max_new_tokens=12), inp=commands,
                        out=out)
    chat.loop()
    text = out.getvalue()
    assert text.count("assistant> ") == 2
    assert "drafter model" in text and "(drafter: none)" in text
    assert "error: unknown drafter 'turbo'" in text
    assert "(new conversation)" in text
    assert len(chat.history) == 2  # /new cleared the first exchange


def test_a_document_attached_in_the_terminal_goes_with_the_next_message(tokenizer, target, tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nThe meeting moved to Thursday at ten.\n")
    loaded = LoadedModel(ModelSource("folder", "tiny"), target, tokenizer, torch.device("cpu"), torch.float32)
    commands = io.StringIO(f"/attach {tmp_path / 'missing.pdf'}\n/attach {notes}\nWhen is the meeting?\n/quit\n")
    out = io.StringIO()
    chat = TerminalChat(ModelPair(loaded, loaded), "pld", GenerationConfig(max_new_tokens=4), inp=commands, out=out)
    seen = []
    real_reply = chat.engine.stream
    chat.engine.stream = lambda messages, *rest: seen.append(messages) or real_reply(messages, *rest)
    chat.loop()
    text = out.getvalue()
    assert "error: missing.pdf" in text and "(attached notes.md: it goes with your next message)" in text
    (messages,) = seen
    assert messages[0].content.startswith('<document name="notes.md">') and "moved to Thursday" in messages[0].content
    assert chat.history[0].content == "When is the meeting?"  # the chat keeps what was typed


def test_draft_tokens_are_coloured_on_a_terminal():
    out = io.StringIO()
    printer = StreamPrinter(out, colour=True)
    printer.show(StepEvent(token_ids=(5, 6, 7), origins=(Origin.DRAFT, Origin.DRAFT, Origin.TARGET),
                           spans=((0, 4), (4, 9), (9, 12)), text_delta="The quick fo", text_offset=0,
                           rejected_ids=(), rejected_text="", stats=GenerationStats(), wall_s=0.0))
    assert out.getvalue() == f"{DRAFT_STYLE}The quick{RESET} fo"


def test_a_reply_cannot_send_escape_sequences_to_the_terminal():
    hostile = "ok\x1b]0;pwned\x07\x1b[2J\x9b31m\tend\n"
    for colour in (True, False):
        out = io.StringIO()
        StreamPrinter(out, colour=colour).show(StepEvent(
            token_ids=(5,), origins=(Origin.TARGET,), spans=((0, len(hostile)),), text_delta=hostile,
            text_offset=0, rejected_ids=(), rejected_text="", stats=GenerationStats(), wall_s=0.0))
        shown = out.getvalue()
        assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
        assert shown == "ok\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\tend\n"  # visible, tab and newline kept
