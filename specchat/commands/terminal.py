"""Terminal front end: streams replies with accepted draft spans coloured (on a tty), and an interactive chat."""

from __future__ import annotations

import re
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Sequence, TextIO

from ..chats.context_plan import ChatDocument
from ..core.errors import SpecchatError
from ..core.run_kind import AWAITING_COSTS
from ..core.text import not_utf8, visible_name
from ..core.vocabulary import LENGTH, Origin
from ..engine.chat_engine import EngineCache, reply_to
from ..engine.chat_prompt import Message
from ..engine.decoding.events import GenerationResult, StepEvent
from ..engine.decoding.speculative import GenerationConfig
from ..engine.loading.pair import ModelPair
from .attachments import plan_with_documents, read_attachments, sources_line

DRAFT_STYLE = "\x1b[30;48;5;151m"  # dark text on a soft green background
REJECTED_STYLE = "\x1b[2;9m"  # faint, struck through
DIM = "\x1b[2m"
RESET = "\x1b[0m"
# Control characters a reply must not send to the terminal: ESC (escape sequences can retitle the window, move the
# cursor, rewrite what is on screen), the other C0 controls but tab and newline, DEL and the C1 controls.
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """Model text as it may be written to a terminal: each control character shown as a visible escape."""
    return CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class StreamPrinter:
    """Prints each step's text as it arrives; draft-accepted tokens get a green background on a terminal."""

    def __init__(self, out: TextIO, show_rejected: bool = False, colour: bool | None = None):
        self.out = out
        self.colour = out.isatty() if colour is None else colour
        self.show_rejected = show_rejected and self.colour

    def show(self, event: StepEvent) -> None:
        if self.colour:
            for text, origin in event.runs():
                text = printable(text)
                self.out.write(f"{DRAFT_STYLE}{text}{RESET}" if origin == Origin.DRAFT else text)
            if self.show_rejected and event.rejected_text:
                self.out.write(f"{REJECTED_STYLE}{printable(event.rejected_text)}{RESET}")
        else:
            self.out.write(printable(event.text_delta))
        self.out.flush()

    def finish(self, result: GenerationResult, drafter: str, file: TextIO) -> None:
        self.out.write("\n")
        self.out.flush()
        print(stats_line(result, drafter, colour=self.colour), file=file)


def stats_line(result: GenerationResult, drafter: str, colour: bool = False) -> str:
    s = result.stats
    parts = [f"{s.new_tokens} tokens", f"{s.tokens_per_s:.1f} tok/s", f"drafter {drafter}"]
    if s.draft_proposed:
        parts += [f"accepted {s.alpha:.0%}", f"tau {s.tau:.2f}", f"mean K {s.mean_k:.1f}"]
    elif s.awaiting_costs:
        parts.append(AWAITING_COSTS)
    if result.finish_reason not in ("eos", "stop"):
        parts.append({"length": "hit the token limit", "context": "context window full",
                      "cancelled": "stopped"}.get(result.finish_reason, result.finish_reason))
    line = "[" + " · ".join(parts) + "]"
    return f"{DIM}{line}{RESET}" if colour else line


HELP = """Commands: /new (start over)  /system TEXT  /attach FILE  /drafter eagle-hybrid|eagle|hybrid|model|pld|none
/continue (the last reply, cut by the token limit, goes on)  /help  /quit
Ctrl-C stops a reply (the partial reply is kept). Green text = draft tokens the model accepted."""


class TerminalChat:
    def __init__(self, pair: ModelPair, drafter: str, config: GenerationConfig, system: str | None = None,
                 inp: TextIO = sys.stdin, out: TextIO = sys.stdout, documents: Sequence[ChatDocument] = ()):
        self.pair = pair
        self.config = config
        self.system = system
        self.history: list[Message] = []
        # attached with the message at their message_id (its place in history): --attach's go with the first
        self.documents: list[ChatDocument] = list(documents)
        self.inp, self.out = inp, out
        self.engines = EngineCache(pair)
        self.engine = self.engines.chat_engine(drafter)
        self.left_out = 0  # how many of the oldest messages the last prompt left out
        # the last reply when the token limit cut it: its prompt's ids and its tokens (what /continue reads again)
        self.cut: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self.drafter = drafter
        self.printer = StreamPrinter(out)

    def loop(self) -> None:
        self._say(f"specchat · {self.pair.target.name} · drafter {self.drafter}\n{HELP}")
        while True:
            line = self._read()
            if line is None or line.strip() in ("/quit", "/exit"):
                return
            if (problem := not_utf8(line, "that line")) is not None:
                self._say(f"error: {problem}")
            elif line.startswith("/"):
                self._command(line.strip())
            elif line.strip():
                self._reply_to(line)

    def _read(self) -> str | None:
        try:
            self.out.write("\nyou> ")
            self.out.flush()
            line = self.inp.readline()
        except KeyboardInterrupt:
            return None
        return line.rstrip("\n") if line else None

    def _command(self, line: str) -> None:
        name, _, rest = line.partition(" ")
        if name == "/new":
            self.history.clear()
            self.documents.clear()
            self.left_out, self.cut = 0, None
            self._say("(new conversation)")
        elif name == "/attach":
            if rest.strip():
                self._attach(Path(rest.strip()).expanduser())
            else:
                self._say("usage: /attach FILE (a text, Markdown, code, PDF, DOCX or HTML file)")
        elif name == "/system":
            self.system = rest.strip() or None
            self._say(f"(system prompt {'set' if self.system else 'cleared'})")
        elif name == "/continue":
            self._continue()
        elif name == "/drafter":
            try:
                self.engine = self.engines.chat_engine(rest.strip())
                self.drafter = rest.strip()
                self._say(f"(drafter: {self.drafter})")
            except (SpecchatError, ValueError) as error:
                self._say(f"error: {error}")
        else:
            self._say(HELP)

    def _attach(self, path: Path) -> None:
        """Reads the file into a document attached to the next message; says why when it cannot."""
        try:
            (document,) = read_attachments([path], message_id=len(self.history))
        except SpecchatError as error:
            self._say(f"error: {error}")
            return
        self.documents.append(replace(document, document_id=len(self.documents) + 1))
        pages = f", {document.document.pages} pages" if document.document.pages else ""
        self._say(f"(attached {visible_name(document.name)}{pages}: it goes with your next message)")

    def _reply_to(self, text: str) -> None:
        self.history.append(Message("user", text))
        cancel = threading.Event()
        try:
            plan = plan_with_documents(self.pair, self.history, range(len(self.history)), self.documents,
                                       self.system, self.config.max_new_tokens)
            fitted = self.engine.fit(plan.messages, self.system, self.config.max_new_tokens)
            left_out = plan.left_out + fitted.left_out
            if left_out > self.left_out:  # said when it grows, not at every turn
                self._say(f"(the {left_out} oldest messages are left out: the chat is longer than the model reads)")
            self.left_out = left_out
            if plan.meter.as_passages:
                self._say(f"({sources_line(plan)})")
            self.out.write("assistant> ")
            result = reply_to(self.engine, plan.messages, self.system, self.config, cancel, self.printer.show)
        except SpecchatError as error:
            self.history.pop()
            self._say(f"\nerror: {error}")
            return
        except KeyboardInterrupt:
            self.out.write("\n(stopped)\n")
            self.history.pop()
            return
        self.history.append(Message("assistant", result.text))
        self.cut = (fitted.ids, result.token_ids) if result.finish_reason == LENGTH else None
        past_replies = getattr(self.engine.engine.drafter, "history", None)  # the history drafter's index
        if past_replies is not None:
            past_replies.add(result.token_ids)
        self.printer.finish(result, self.drafter, file=self.out)

    def _continue(self) -> None:
        """/continue: the last reply, cut by the token limit, goes on where it stopped, up to the limit again: its
        prompt and its tokens are read again as its own steps read them (SpeculativeEngine.stream's `continuing`),
        so a greedy reply goes on as a higher limit would have made it. Its text in the history grows."""
        if self.cut is None:
            self._say("(nothing to continue: only the last reply, when the token limit cut it, goes on)")
            return
        prompt_ids, written = self.cut
        result = None
        try:
            self.out.write("assistant (continued)> ")
            for event in self.engine.stream_ids(prompt_ids, self.config, threading.Event(), continuing=written):
                self.printer.show(event)
                result = event.result or result
        except SpecchatError as error:
            self._say(f"\nerror: {error}")
            return
        except KeyboardInterrupt:
            self.out.write("\n(stopped: the reply stays as it was)\n")
            return
        self.history[-1] = Message("assistant", result.text)  # the whole reply's text
        self.cut = (prompt_ids, written + result.token_ids) if result.finish_reason == LENGTH else None
        self.printer.finish(result, self.drafter, file=self.out)

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)
