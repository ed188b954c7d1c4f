"""What a chat's next reply reads, within the model's context window: its system prompt, its turns, its documents
(whole, or the passages that best match the question), and the question. The same plan drives the prompt and the
context meter under the composer, so the meter says exactly what a send will leave out. No Qt, no torch.

The rules, in order of what is never left out:
- the system prompt and the question (its typed text) always stay;
- the documents stay: whole when they all fit beside the question and the reply's room, else as the passages that
  best match the question (each labelled with its source and page), filling their share of the window;
- the chat's earlier turns fill what is left, newest first. Old turns are left out in blocks: the first kept turn
  is the first user turn past a multiple of half the window, counted from the first turn the plan is given (the
  chat's start, or in a chat far longer than the window an anchor a multiple of 256 turns back: chats/plan_start.py),
  so the prompt's start (and the cached state of reading it) stays the same for many turns, and moves only when the
  chat outgrows it again.

A document belongs to the message it was attached to and is read there, before that message's text, so a follow-up
reads the same prefix as the turn before it. A document whose message was left out moves to the first kept turn.
"""

from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ..core.errors import PromptError
from ..documents.document import Document, Passage
from ..documents.ranking import rank_passages
from ..engine.chat_prompt import Message, tokenizer_lock

MESSAGE_OVERHEAD = 8  # tokens a chat template adds around one message (turn markers, role, newlines), a bound
BLOCK_SHARE = 2  # old turns are left out in blocks of a 1/BLOCK_SHARE of the window
PASSAGE_NEIGHBOURS = 1  # passages kept on each side of a matching one, so a quote keeps its context
SEARCH_LIMIT = 12  # best-matching passages asked of the search at most
COUNTING = "counting tokens…"  # what the meter and a chip say of tokens being counted off the GUI thread
CHARS_PER_TOKEN_GUESS = 4  # a text not counted yet is taken for a token per this many characters (DeferredCounts)


@dataclass(frozen=True)
class ChatDocument:
    """A document of the chat as the plan reads it: its stored id (None: not stored yet), the message it was
    attached to (None: pending, attached to the message being typed), its text and passages, and its tokens under
    the model (None: not counted yet; counting a long document takes seconds, so it is counted once, where it is
    read, off the GUI thread, and kept with it)."""

    document_id: int | None
    message_id: int | None
    document: Document
    tokens: int | None = None

    @property
    def name(self) -> str:
        return self.document.name


@dataclass(frozen=True)
class Source:
    """What a reply was given of a document: the whole of it (passage None) or one passage, with its page."""

    document_id: int | None
    name: str
    page: int | None = None
    passage: int | None = None
    text: str = ""

    @property
    def label(self) -> str:
        """How the footer and the prompt name it: "report.pdf" or "report.pdf, p. 3"."""
        return self.name + (f", p. {self.page}" if self.page is not None else "")

    def stored(self) -> list:
        """Its stored form (a run's sources): [document id, name, page, passage]; the text is the document's."""
        return [self.document_id, self.name, self.page, self.passage]


def stored_sources(entries, documents: Sequence[ChatDocument]) -> tuple[Source, ...]:
    """A run's stored sources as Sources, each passage's text taken from the chat's `documents` (a document since
    deleted gives its source no text)."""
    by_id = {d.document_id: d.document for d in documents}
    sources = []
    for document_id, name, page, passage in entries:
        document = by_id.get(document_id)
        known = document is not None and passage is not None and 0 <= passage < len(document.passages)
        sources.append(Source(document_id, name, page, passage, document.passages[passage].text if known else ""))
    return tuple(sources)


@dataclass(frozen=True)
class PassageMatch:
    """A passage a search found for the question, best first (storage's PassageHit, or the in-memory ranking's)."""

    document_id: int | None
    passage: Passage


# query, limit -> the chat's best-matching passages, best first
Search = Callable[[str, int], Sequence[PassageMatch]]


def memory_search(documents: Sequence[ChatDocument]) -> Search:
    """A Search over documents that are not stored (the command line's and the API's attachments): the same BM25
    as the database's, in memory (documents/ranking.py). The documents need distinct document_ids."""
    keyed = [(d.document_id, d.document) for d in documents]
    return lambda query, limit: [PassageMatch(r.document_id, r.passage) for r in rank_passages(keyed, query, limit)]


@dataclass(frozen=True)
class ContextMeter:
    """Tokens of each part of the next prompt against the window: what the meter under the composer draws."""

    system: int
    documents: int
    chat: int
    message: int
    reply: int
    window: int
    left_out_messages: int = 0
    as_passages: tuple[str, ...] = ()  # documents too long to read whole: read as their best passages
    counting: bool = False  # some of its texts are being counted off the GUI thread: their tokens are guessed

    @property
    def used(self) -> int:
        return self.system + self.documents + self.chat + self.message

    @property
    def overflows(self) -> bool:
        """The prompt does not fit with the reply's room: the question alone, with its system prompt, is too long."""
        return self.used + self.reply > self.window

    def summary(self) -> str:
        """One line: "1,204 / 8,192 tokens · system 20 · documents 900 · chat 250 · message 34", and "counting
        tokens…" last while some are being counted (the figures guessed until then)."""
        parts = [f"{self.used:,} / {self.window:,} tokens"]
        for name, value in (("system", self.system), ("documents", self.documents), ("chat", self.chat),
                            ("message", self.message)):
            if value:
                parts.append(f"{name} {value:,}")
        if self.counting:
            parts.append(COUNTING)
        return " · ".join(parts)

    def warning(self) -> str:
        """What a send will leave out or shorten ("" when everything is read whole)."""
        said = []
        if self.overflows:
            said.append("The message is too long for the model's context window with room for a reply: shorten it.")
        if self.as_passages:
            names = " and ".join(self.as_passages) if len(self.as_passages) < 3 else \
                f"The {len(self.as_passages)} documents"
            said.append(f"{names} {'is' if len(self.as_passages) == 1 else 'are'} too long to read whole"
                        f"{'' if len(self.as_passages) == 1 else ' together'}: the passages that best match the "
                        "question will be read.")
        if self.left_out_messages:
            many = self.left_out_messages > 1
            said.append(f"The {self.left_out_messages:,} oldest message{'s' if many else ''} will be left out "
                        "(they stay saved).")
        return " ".join(said)


@dataclass(frozen=True)
class PromptPlan:
    """The messages the model reads (documents placed in them), what was left out and what was given."""

    messages: tuple[Message, ...]
    left_out: int
    sources: tuple[Source, ...]
    meter: ContextMeter


class TokenCounter:
    """Counts tokens of text with a model's tokenizer, remembering the counts of the `remember` texts it used last
    (a chat's turns and documents are counted once, not at every keystroke). Each count holds the tokenizer's lock
    (engine.chat_prompt.tokenizer_lock): the GUI thread plans while the background thread counts a document."""

    def __init__(self, tokenizer, remember: int = 4096):
        self.tokenizer = tokenizer
        self._known: dict[str, int] = {}
        self._remember = remember
        self._lock = threading.Lock()  # guards _known, which every thread counting with the tokenizer shares

    def __call__(self, text: str) -> int:
        """The tokens of `text`: remembered, else counted now (waiting for the tokenizer while another thread
        encodes with it)."""
        known = self.known(text)
        if known is None:
            known = self._counted(text, wait=True)
        return known

    def known(self, text: str) -> int | None:
        """The tokens of `text` when they are remembered (0 for no text), else None; never calls the tokenizer."""
        if not text:
            return 0
        with self._lock:
            known = self._known.pop(text, None)
            if known is not None:
                self._known[text] = known  # the most recently used last: the oldest go first
        return known

    def count_if_free(self, text: str) -> int | None:
        """The tokens of `text`: remembered, or counted now when no other thread is encoding with the tokenizer;
        None when one is (the GUI thread does not wait for a background count)."""
        known = self.known(text)
        return known if known is not None else self._counted(text, wait=False)

    def _counted(self, text: str, wait: bool) -> int | None:
        """`text` counted under the tokenizer's lock and remembered; None when `wait` is False and another thread
        holds the lock."""
        lock = tokenizer_lock(self.tokenizer)
        if not lock.acquire(blocking=wait):
            return None
        try:
            counted = len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        finally:
            lock.release()
        with self._lock:
            if len(self._known) >= self._remember:
                self._known.pop(next(iter(self._known)))
            self._known[text] = counted
        return counted


_COUNTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def counter_for(tokenizer) -> TokenCounter:
    """The one TokenCounter of `tokenizer` (kept as long as the tokenizer is), so counts survive from keystroke to
    keystroke and from turn to turn."""
    counter = _COUNTERS.get(tokenizer)
    if counter is None:
        counter = _COUNTERS[tokenizer] = TokenCounter(tokenizer)
    return counter


class DeferredCounts:
    """The counts of a plan made on the GUI thread (the context meter's), which never waits for the tokenizer:
    calling it counts a turn or a label (remembered, or counted now when the tokenizer is free); `document` counts
    a document's text or passages only when they are remembered (a megabyte takes the tokenizer two seconds). Any
    other text gets a guess (CHARS_PER_TOKEN_GUESS) and is `owed`: to be counted off the GUI thread (by `counter`,
    which then remembers it) before the plan is made again."""

    def __init__(self, counter: TokenCounter):
        self.counter = counter
        self._owed: dict[str, None] = {}  # in the order they were asked for, each once

    @property
    def owed(self) -> list[str]:
        """The texts guessed at, not counted yet, in the order they were asked for."""
        return list(self._owed)

    def __call__(self, text: str) -> int:
        counted = self.counter.count_if_free(text)
        return counted if counted is not None else self._guess(text)

    def document(self, text: str) -> int:
        known = self.counter.known(text)
        return known if known is not None else self._guess(text)

    def _guess(self, text: str) -> int:
        self._owed[text] = None
        return -(-len(text) // CHARS_PER_TOKEN_GUESS)


DOCUMENT_END = "\n</document>\n\n"
_DOCUMENT_START = re.compile(r'^<document name="([^"\n]*)">$', re.MULTILINE)


def document_block(name: str, text: str) -> str:
    """A whole document as the model reads it, before the text of the message it was attached to."""
    return f'<document name="{_attribute(name)}">\n{text}{DOCUMENT_END}'


def question_title(text: str) -> str:
    """A short line for a question as the model read it (OpenChat.question_as_read): its first line, after the
    names of the documents placed before it ("notes.txt, report.pdf: When does it open?"). Takes any prompt; one
    without documents gives its first line."""
    names: list[str] = []
    if text.startswith('<document name="') and DOCUMENT_END in text:
        documents, text = text.rsplit(DOCUMENT_END, 1)
        names = [name.replace("\\\\", "\\") for name in _DOCUMENT_START.findall(documents)]
    line = text.strip().splitlines()[0] if text.strip() else ""
    return f"{', '.join(names)}: {line}" if names else line


PASSAGES_INTRO = "Passages from the attached documents that best match the question:\n\n"


def passage_text(source: Source) -> str:
    """One passage as the model reads it, labelled with its source and place."""
    return f'<passage source="{_attribute(source.label)}">\n{source.text}\n</passage>'


def passages_block(sources: Sequence[Source]) -> str:
    """The passages given for a question, in document order, after a line saying what they are."""
    return (PASSAGES_INTRO + "\n\n".join(passage_text(s) for s in sources) + "\n\n") if sources else ""


def plan_prompt(turns: Sequence[Message], message_ids: Sequence[int | None], documents: Sequence[ChatDocument],
                system: str | None, count: Callable[[str], int], window: int, max_new_tokens: int,
                search: Search | None = None, count_documents: Callable[[str], int] | None = None) -> PromptPlan:
    """The plan of the prompt for a reply to `turns` (the chat's messages in order, the last one the question, a
    user message; `message_ids` the id of each, None for one not stored yet) under `system`, with the chat's
    `documents` (each placed at its message; one whose message_id is None goes with the question), `count` the
    model's token counter, for a reply of up to max_new_tokens in a `window` of positions. `search` finds passages
    when the documents do not fit whole (None: the first passages of each document are used). `count_documents`
    counts the documents' texts, their passages and the passages' block (None: `count`; the meter's
    DeferredCounts.document, which guesses those not counted yet). Never raises: a question that does not fit is
    said by the meter (`overflows`), and the fitter refuses it."""
    count_documents = count_documents or count
    reply = min(max_new_tokens, window // 4)
    budget = window - reply
    system_tokens = count(system) + MESSAGE_OVERHEAD if system else 0
    question_tokens = count(turns[-1].content) + MESSAGE_OVERHEAD if turns else 0
    room = max(0, budget - system_tokens - question_tokens)
    whole = sum(_document_tokens(d, count, count_documents) for d in documents)
    if whole <= room:
        sources = tuple(Source(d.document_id, d.name) for d in documents)
        documents_tokens, as_passages = whole, ()
    else:
        share = room - min(room // 4, _earlier_tokens(turns, count))  # leave the newest turns some room
        sources = _passages_within(documents, turns[-1].content if turns else "", share, search,
                                   count, count_documents)
        documents_tokens = count_documents(passages_block(sources)) if sources else 0
        as_passages = tuple(d.name for d in documents)
    chat_room = max(0, room - documents_tokens)
    start = _first_kept_turn(turns, count, chat_room, window)
    chat_tokens = sum(count(m.content) + MESSAGE_OVERHEAD for m in turns[start:-1])
    meter = ContextMeter(system_tokens, documents_tokens, chat_tokens, question_tokens, reply, window, start,
                         as_passages)
    messages = _placed(turns, message_ids, documents, start, sources if as_passages else None)
    return PromptPlan(messages, start, sources, meter)


def plan_in_memory(turns: Sequence[Message], message_ids: Sequence[int | None], documents: Sequence[ChatDocument],
                   system: str | None, count: Callable[[str], int], window: int,
                   max_new_tokens: int) -> PromptPlan:
    """plan_prompt for documents that are not stored (`specchat generate --attach`, `specchat chat --attach`, a
    request to `specchat serve`): their passages ranked in memory (memory_search; the documents need distinct
    document_ids). Returns the plan; PromptError, with the meter's warning, when the question alone does not fit
    the window with room for the reply."""
    plan = plan_prompt(turns, message_ids, documents, system, count, window, max_new_tokens, memory_search(documents))
    if plan.meter.overflows:
        raise PromptError(plan.meter.warning())
    return plan


def _document_tokens(chat_document: ChatDocument, count: Callable[[str], int],
                     count_text: Callable[[str], int]) -> int:
    """A whole document's tokens in the prompt: its text (as counted where it was read, else by `count_text`) and
    its label (by `count`)."""
    text = chat_document.tokens if chat_document.tokens is not None else count_text(chat_document.document.text)
    return text + count(document_block(chat_document.name, "")) + MESSAGE_OVERHEAD


def _earlier_tokens(turns: Sequence[Message], count: Callable[[str], int]) -> int:
    return sum(count(m.content) + MESSAGE_OVERHEAD for m in turns[:-1])


def _first_kept_turn(turns: Sequence[Message], count: Callable[[str], int], room: int, window: int) -> int:
    """The index of the first turn the prompt keeps (0: all; len(turns) - 1: only the question). Candidates are the
    block starts: the first user turn once the tokens before it have passed another multiple of window /
    BLOCK_SHARE, counted from the first of `turns` (the chat's start, or its anchor: plan_start.py). That depends
    only on the turns before it, which never change, so the start stays put as the chat grows, until the kept part
    outgrows `room` again; the earliest candidate whose kept part fits is taken."""
    earlier = [count(m.content) + MESSAGE_OVERHEAD for m in turns[:-1]]
    total = sum(earlier)
    if total <= room:
        return 0
    block = max(1, window // BLOCK_SHARE)
    before, last_block = 0, 0
    for index, tokens in enumerate(earlier):
        if index and turns[index].role == "user":
            if before // block > last_block:
                last_block = before // block
                if total - before <= room:
                    return index
        before += tokens
    return len(turns) - 1


def _passages_within(documents: Sequence[ChatDocument], question: str, share: int, search: Search | None,
                     count: Callable[[str], int], count_text: Callable[[str], int]) -> tuple[Source, ...]:
    """The passages that best match `question`, each with its neighbours, that fit `share` tokens, in document
    order; without a search (or when it finds nothing), the documents' first passages. A passage's text is counted
    by `count_text`, its label by `count`."""
    place = {d.document_id: index for index, d in enumerate(documents)}  # in the chat's order
    matches = list(search(question, SEARCH_LIMIT)) if search is not None and question.strip() else []
    wanted: list[tuple[int, int]] = []  # (document's place, passage position), best first
    for match in matches:
        index = place.get(match.document_id)
        if index is None:
            continue
        last = len(documents[index].document.passages) - 1
        for position in range(max(0, match.passage.position - PASSAGE_NEIGHBOURS),
                              min(last, match.passage.position + PASSAGE_NEIGHBOURS) + 1):
            wanted.append((index, position))
    if not wanted:
        wanted = [(index, p.position) for index, d in enumerate(documents) for p in d.document.passages]
    chosen: dict[tuple[int, int], Source] = {}
    spent = count(PASSAGES_INTRO) + MESSAGE_OVERHEAD
    for key in wanted:
        if key in chosen:
            continue
        chat_document = documents[key[0]]
        passage = chat_document.document.passages[key[1]]
        source = Source(chat_document.document_id, chat_document.name, passage.page, key[1], passage.text)
        # the passage's text (counted where it was read) and its label, each counted alone: a bound on the whole,
        # since tokens do not merge across the label's edges by more than a few
        cost = count_text(source.text) + count(passage_text(replace(source, text=""))) + MESSAGE_OVERHEAD
        if spent + cost > share:
            break  # the best ones are in; counting the rest of a long document would cost seconds
        chosen[key], spent = source, spent + cost
    return tuple(chosen[key] for key in sorted(chosen))


def _placed(turns: Sequence[Message], message_ids: Sequence[int | None], documents: Sequence[ChatDocument],
            start: int, passages: Sequence[Source] | None) -> tuple[Message, ...]:
    """The kept turns (from `start`, the question last) with the documents placed: whole, before the text of the
    message each was attached to (or of the first kept message, its own left out; or of the question, pending);
    as passages (`passages` not None), all of them before the question."""
    kept = list(turns[start:])
    ids = list(message_ids[start:])
    if not kept:
        return ()
    prefixes = ["" for _ in kept]
    if passages is None:
        for chat_document in documents:
            at = ids.index(chat_document.message_id) if chat_document.message_id in ids else \
                (len(kept) - 1 if chat_document.message_id is None else 0)
            if kept[at].role != "user":
                at = next((i for i in range(at, len(kept)) if kept[i].role == "user"), len(kept) - 1)
            prefixes[at] += document_block(chat_document.name, chat_document.document.text)
    else:
        prefixes[-1] = passages_block(passages)
    return tuple(Message(m.role, prefix + m.content) if prefix else m for m, prefix in zip(kept, prefixes))


def _attribute(text: str) -> str:
    """Text safe inside a label's double quotes (a file's name is the user's, and may hold anything)."""
    return text.replace("\\", "\\\\").replace('"', "'").replace("\n", " ")[:200]
