"""A chat reply from Enter to its rows, without Qt: its prompt fitted once, its rows begun, its steps gathered as they
stream (text, spans, rejected proposals: the one place they are gathered) and saved now and then, and the reply
finished or failed with its run completed. The window calls it and draws what each call returns (the dataclasses
below); the controller emits nothing.

    controller = ReplyController(ReplyRecorder(store, runs))
    began = controller.start(chat, engine)   # ReplyBegan: the rows are written; began.job goes to the model thread
    drawn = controller.steps(batch, now)     # a frame's StepBatch gathered: StepsArrived to draw; now and then saved
    ended = controller.finish(result)        # or controller.fail(message): ReplyEnded, saved, to draw

Nothing written is read back: each write returns its row (the placeholder, the final message, the run's record), and
the open chat (OpenChat) and the reply's footer are kept up to date from them. The stored forms of the spans and the
statistics are made by the recorder (recorder.py), once, as it writes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable, Sequence

from ..core.errors import ContinueError, StorageError
from ..core.vocabulary import ERROR, STREAMING
from ..engine.chat_engine import ChatEngine, PromptFitter
from ..engine.chat_prompt import Message
from ..engine.decoding.events import GenerationResult, GenerationStats, StepEvent
from ..engine.decoding.speculative import GenerationConfig
from ..storage.records import MessageInfo, RunRecord
from .context_plan import Search, Source
from .continuation import can_continue, plan_continuation
from .conversations import OpenChat
from .recorder import RecordedReply, ReplyRecorder, stopped_by_user
from .reply_spans import ReplySpans
from .run_book import footer_text
from .run_context import RunContext

SAVE_PARTIAL_S = 1.0  # how often a streaming reply is written to disk (seconds)

@dataclass(frozen=True)
class ReplyEngine:
    """What a reply runs on, decided before it starts (ChatSession.reply_engine): what it runs with (context), the
    maker of its ChatEngine (called on the model thread), the PromptFitter that makes its prompt (the one fitter,
    engine/chat_engine.py: EngineCache.fitter's for a local reply; None for a remote engine, which reads the
    messages and applies its own template) and what runs on the finished reply on the model thread (the
    past-replies index; None for a remote reply, which has no token ids). read_first: what gives a branch's
    drafting the replies beside it first (on the model thread, before it starts: the session puts them at the
    newest end of the past-replies index; None: nothing reads them)."""

    context: RunContext
    make_engine: Callable[[], ChatEngine]
    prompts: PromptFitter | None = None
    on_result: Callable[[GenerationResult], None] | None = None
    read_first: Callable[[Sequence[str]], None] | None = None


@dataclass(frozen=True)
class ReplyJob:
    """What the model thread runs for a reply (ui/reply_workers.py's GenerationWorker takes it as it is): the
    engine's maker, the conversation, the config (its seed set), the prompt fitted once (prompt_ids; None: the
    engine reads the messages itself) with its length, and what runs on the finished reply there (on_result)."""

    make_engine: Callable[[], ChatEngine]
    messages: tuple[Message, ...]
    system: str | None
    config: GenerationConfig
    prompt_ids: tuple[int, ...] | None
    prompt_tokens: int
    on_result: Callable[[GenerationResult], None] | None = None
    before: Callable[[], None] | None = None  # run on the model thread before the engine starts (read_first)
    continuing: tuple[int, ...] = ()  # a continued reply's tokens, read after prompt_ids (stream_ids' continuing)


@dataclass(frozen=True)
class StepBatch:
    """The steps of the streaming reply that one frame brings (ui/reply_workers.py batches them on the model
    thread), with the reply's statistics as of the last of them: a copy taken there, once a batch, while the engine
    waits (the events share the generation's one running GenerationStats)."""

    events: tuple[StepEvent, ...]
    stats: GenerationStats


# -- what the window draws, as the controller returns it ------------------------------------------------------------

@dataclass(frozen=True)
class ReplyBegan:
    """A reply's rows are on disk and its job is ready: the window opens the reply's region (with `note`, what the
    prompt left out, if anything), claims the device and hands `job` to the model thread. A continued reply's region
    starts with its text so far (`text`, with its `spans`), and what streams follows it."""

    conversation_id: int
    message_id: int
    job: ReplyJob
    note: str = ""
    sources: tuple[Source, ...] = ()
    text: str = ""
    spans: ReplySpans | None = None


@dataclass(frozen=True)
class StepsArrived:
    """Steps to draw as they are (tokens appended live; the controller has gathered them already), the statistics so
    far (the status bar's tokens and speed), and `trouble`: what the user should know while the reply goes on (a
    partial save refused, said once)."""

    events: tuple[StepEvent, ...]
    stats: GenerationStats
    trouble: str | None = None


@dataclass(frozen=True)
class ReplyEnded:
    """The reply has ended and is saved (saved) or not: the window draws the whole chat once, with this reply as
    stored (or from memory, footer "not saved"), says `problem` if any and `note` again; runs_changed: its run was
    completed, so the statistics changed."""

    conversation_id: int
    message_id: int
    text: str
    spans: ReplySpans
    stopped: bool
    footer: str
    note: str = ""
    saved: bool = True
    problem: str | None = None
    runs_changed: bool = False


# -- the reply streaming now ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Earlier:
    """What a continued reply had when it went on: its text and spans as stored, the tokens read after its prompt
    (continuation.Continuation.written), and whether they are its own (`own`: its text is then what they decode
    to, which the engine's decoding confirms; else its text stays as stored and the new text follows it)."""

    text: str
    spans: tuple[tuple[int, int, str], ...]
    token_ids: tuple[int, ...]
    own: bool


@dataclass
class StreamingReply:
    """The reply streaming now: its chat, its rows (ReplyRecorder.begin), what the user should know of its prompt,
    and what it has streamed, gathered from its steps (text, spans, token ids and rejected proposals), with when it
    was last saved and its run as saved then (what a failed reply's footer says; None: not saved since it began).
    A continued reply starts with what it had (`earlier`; its text, spans and ids first) and its run is part `part`
    of it."""

    chat: OpenChat
    rows: RecordedReply
    note: str = ""
    sources: tuple[Source, ...] = ()  # what the reply was given of the chat's documents
    text: str = ""
    spans: ReplySpans = field(default_factory=ReplySpans)
    last_saved: float = 0.0
    save_failed: bool = False  # a partial save failed: said once, retried at the next save time
    saved_run: RunRecord | None = None
    token_ids: list[int] = field(default_factory=list)
    keeps_ids: bool = True  # False: a remote engine's reply, whose tokens are not the model's (not stored)
    earlier: Earlier | None = None
    part: int = 1

    @property
    def conversation_id(self) -> int:
        return self.rows.conversation_id

    @property
    def message_id(self) -> int:
        return self.rows.message_id

    @property
    def kept_ids(self) -> list[int] | None:
        """The token ids to store with the text (None: not kept)."""
        return self.token_ids if self.keeps_ids else None

    def add(self, event: StepEvent) -> None:
        """Gathers one step: its text, its tokens' ids, spans and origins, and the proposal the target rejected. A
        continued reply's spans are moved by what its stored text and its tokens' decoding differ by at the cut (a
        character split there: 0 almost always; a new reply's step starts where its text ends)."""
        shift = len(self.text) - event.text_offset
        self.spans.add_tokens([(a + shift, b + shift) for a, b in event.spans] if shift else event.spans,
                              event.origins)
        self.text += event.text_delta
        self.token_ids.extend(event.token_ids)
        if event.rejected_text:
            self.spans.add_rejected(len(self.text), event.rejected_text)

    def end(self, result: GenerationResult) -> None:
        """The finished reply's text and spans are the result's, which is the authority (a character the detokenizer
        held back goes to the last token as the reply ends); the rejected proposals stay as gathered. A continued
        reply's result starts with its earlier tokens' text (text_start): that text, or the stored one where they
        are not its own, then the new text, with the earlier spans kept; stopped before its first new token, it
        stays as it was."""
        earlier, rejected = self.earlier, self.spans.rejected
        if earlier is not None and not result.token_ids:
            self.text, self.token_ids = earlier.text, list(earlier.token_ids)
            self.spans = ReplySpans(list(earlier.spans), rejected)
            return
        start = result.text_start
        base = earlier.text if earlier is not None and not earlier.own else result.text[:start]
        shift = len(base) - start
        spans = ReplySpans([(a, min(b, len(base)), o) for a, b, o in (earlier.spans if earlier else ())
                            if a < len(base)], rejected=rejected)
        spans.add_tokens([(a + shift, b + shift) for a, b in result.spans], result.origins)
        self.text, self.spans = base + result.text[start:], spans
        self.token_ids = [*(earlier.token_ids if earlier else ()), *result.token_ids]


def left_out_note(left_out: int, as_passages: Sequence[str] = ()) -> str:
    """What the user is told when the prompt leaves out the chat's `left_out` oldest messages, or reads the
    documents `as_passages` in part ("" for neither)."""
    said = []
    if as_passages:
        said.append(f"{', '.join(as_passages)} {'is' if len(as_passages) == 1 else 'are'} longer than the context "
                    "window holds: the model reads the passages that best match the question.")
    if left_out:
        many = left_out > 1
        said.append(f"The {left_out:,} oldest message{'s' if many else ''} of this chat {'are' if many else 'is'} left "
                    "out of what the model reads: the chat is longer than its context window. They stay saved.")
    return " ".join(said)


class ReplyController:
    """The chat's replies, one at a time: `active` is the one streaming (None between replies). Each call returns
    what the window draws (the dataclasses above); `rejected` keeps each reply's rejected proposals for this app
    session (they are shown, never stored)."""

    def __init__(self, recorder: ReplyRecorder, search_for: Callable[[int], Search] | None = None):
        self.recorder = recorder
        self.search_for = search_for  # a chat's passage search, by conversation id (Conversations.search_for)
        self.active: StreamingReply | None = None
        self.rejected: dict[int, list[tuple[int, str]]] = {}

    def start(self, chat: OpenChat, engine: ReplyEngine, seed: int | None = None,
              sample_at: float | None = None) -> ReplyBegan:
        """Plans the chat's prompt (its turns and documents within the window: OpenChat.plan) and fits it (once:
        the model thread streams these ids), picks the seed (random unless given) and writes the reply's
        placeholder and run (ReplyRecorder.begin); returns ReplyBegan with the job for the model thread and the
        sources the reply is given. `sample_at`: a temperature a greedy config samples at instead (Regenerate:
        another reply, not the same one again); a sampling config keeps its own. Raises PromptError (the last
        message alone does not fit) before anything is written, and StorageError when the rows cannot be written
        (the chat is then read again before its next reply)."""
        if sample_at and engine.context.config.sampling.temperature == 0:
            engine = replace(engine, context=engine.context.sampling_at(sample_at))
        config, system = engine.context.config, chat.system_prompt
        search = self.search_for(chat.conversation_id) if self.search_for is not None else None
        plan = chat.plan(engine.prompts, config.max_new_tokens, search)
        messages = plan.messages
        prompt = engine.prompts.fit(messages, system, config.max_new_tokens) if engine.prompts is not None else None
        context = engine.context.seeded(random.SystemRandom().randrange(2**31) if seed is None else seed)
        prompt_tokens = len(prompt.ids) if prompt is not None else 0
        try:
            rows = self.recorder.begin(chat.conversation_id, prompt_tokens, context,
                                       [source.stored() for source in plan.sources] or None)
        except StorageError:
            chat.stale = True  # a placeholder may be written: what is stored is unsure
            raise
        left_out = plan.left_out + (prompt.left_out if prompt is not None else 0)
        self.active = StreamingReply(chat, rows, left_out_note(left_out, plan.meter.as_passages),
                                     sources=plan.sources, keeps_ids=engine.prompts is not None)
        beside = self.recorder.sibling_replies(rows) if engine.read_first is not None else []
        job = ReplyJob(engine.make_engine, messages, system, context.config,
                       prompt.ids if prompt is not None else None, prompt_tokens, engine.on_result,
                       before=partial(engine.read_first, tuple(beside)) if beside else None)
        return ReplyBegan(rows.conversation_id, rows.message_id, job, self.active.note, plan.sources)

    def continue_reply(self, chat: OpenChat, engine: ReplyEngine, message_id: int,
                       seed: int | None = None) -> ReplyBegan:
        """Goes on with the chat's last reply `message_id`, cut short (continuation.can_continue), in its own
        message: the prompt it was started from, planned and fitted again, then its stored tokens
        (continuation.plan_continuation, which says what the continuation promises: its run's exactness); the
        message is marked streaming and a run of its own begins (ReplyRecorder.resume), for up to max_new_tokens
        more tokens. Returns ReplyBegan as start does, with the reply's text so far to draw before what streams.
        Raises ContinueError or PromptError before anything is written, StorageError when the reply cannot be read
        or its rows written."""
        last = chat.last_reply()
        stored = self.recorder.stored(message_id) if last is not None and last.id == message_id else None
        if stored is None or not can_continue(stored.message):
            raise ContinueError("only the chat's last reply, when it was cut short, can be continued")
        if engine.prompts is None:
            raise ContinueError("a remote engine's reply cannot be continued: it sends text, not the model's tokens")
        reply = stored.message
        search = self.search_for(chat.conversation_id) if self.search_for is not None else None
        going_on = plan_continuation(chat, stored, engine.prompts, engine.context, search)
        context = engine.context.seeded(random.SystemRandom().randrange(2**31) if seed is None else seed)
        context = replace(context, models=replace(context.models, exactness=going_on.exactness))
        prompt_tokens, plan = len(going_on.prompt.ids) + len(going_on.written), going_on.plan
        try:
            rows = self.recorder.resume(stored.message, prompt_tokens, context,
                                        [source.stored() for source in plan.sources] or None)
        except StorageError:
            chat.stale = True  # the message may be marked streaming: what is stored is unsure
            raise
        left_out = left_out_note(plan.left_out + going_on.prompt.left_out, plan.meter.as_passages)
        note = " ".join(said for said in (going_on.note, left_out) if said)
        spans = ReplySpans.from_json(reply.spans, self.rejected.get(message_id))
        earlier = Earlier(reply.text, tuple(spans.spans), going_on.written, going_on.own)
        self.active = StreamingReply(chat, rows, note, plan.sources, reply.text, spans, earlier=earlier,
                                     token_ids=list(going_on.written), part=len(stored.runs) + 1)
        job = ReplyJob(engine.make_engine, plan.messages, chat.system_prompt, context.config, going_on.prompt.ids,
                       prompt_tokens, engine.on_result, continuing=going_on.written)
        return ReplyBegan(rows.conversation_id, rows.message_id, job, note, plan.sources, reply.text,
                          ReplySpans.from_json(reply.spans))

    def steps(self, batch: StepBatch, now: float) -> StepsArrived | None:
        """Gathers the steps that arrived (the window calls it with each batch, one a frame at most) and saves the
        reply so far when SAVE_PARTIAL_S have passed since the last save (now: time.perf_counter). Returns them to
        draw, with any trouble to say; None when no reply streams or the batch is empty."""
        reply = self.active
        if reply is None or not batch.events:
            return None
        for event in batch.events:
            reply.add(event)
        trouble = None
        if now - reply.last_saved > SAVE_PARTIAL_S:
            reply.last_saved = now  # a failed save is retried at the next save time, not every frame
            trouble = self._save_partial(reply, batch.stats)
        return StepsArrived(batch.events, batch.stats, trouble)

    def _save_partial(self, reply: StreamingReply, stats: GenerationStats) -> str | None:
        """Saves the reply so far with its run's figures (stats); returns what the user is told of a refusal, the
        first time only (None otherwise)."""
        try:
            reply.saved_run = self.recorder.partial(reply.rows, reply.text, reply.spans, stats, reply.kept_ids)
        except StorageError as error:
            said, reply.save_failed = reply.save_failed, True
            return None if said else (f"The reply so far could not be saved ({error}); it keeps streaming, and "
                                      "saving is tried again every second.")
        return None

    def finish(self, result: GenerationResult) -> ReplyEnded:
        """The reply ended (finished, or stopped: its result): saves it and completes its run; returns ReplyEnded
        with its footer from the run just written."""
        reply = self._take()
        reply.end(result)
        try:
            message, run = self.recorder.finish(reply.rows, result, reply.spans, reply.text, reply.kept_ids)
        except StorageError as error:
            return self._unsaved(reply, stopped_by_user(result), error)
        # no run: stopped before its first token (a continued reply keeps the line of its earlier part)
        footer = footer_text(run, reply.part) if run is not None else reply.chat.footers.get(reply.message_id, "")
        return self._saved(reply, message, footer, runs_changed=run is not None)

    def fail(self, problem: str) -> ReplyEnded:
        """The reply failed (problem: what the user is told): saves what it had streamed and marks its run; returns
        ReplyEnded with `problem`."""
        reply = self._take()
        try:
            message, marked = self.recorder.fail(reply.rows, reply.text, reply.spans, reply.kept_ids)
        except StorageError as error:
            return self._unsaved(reply, True, error, also=problem)
        run = replace(reply.saved_run or reply.rows.run, finish_reason=ERROR if marked else STREAMING)
        return self._saved(reply, message, footer_text(run, reply.part), problem=problem)

    def _take(self) -> StreamingReply:
        reply, self.active = self.active, None
        if reply is None:
            raise RuntimeError("no reply is streaming")
        self.rejected[reply.message_id] = reply.spans.rejected
        return reply

    def _saved(self, reply: StreamingReply, message: MessageInfo, footer: str, runs_changed: bool = False,
               problem: str | None = None) -> ReplyEnded:
        """The ended reply as stored joins its chat (a continued one takes its own place there), with the sources
        it was given; the window draws it as stored."""
        at = next((i for i, m in enumerate(reply.chat.messages) if m.id == message.id), None)
        if at is None:
            reply.chat.add(message, footer)
        else:
            reply.chat.messages[at] = message
            reply.chat.footers[message.id] = footer
        if reply.sources:
            reply.chat.sources[message.id] = reply.sources
        spans = ReplySpans.from_json(message.spans, self.rejected.get(message.id))
        return ReplyEnded(reply.conversation_id, message.id, message.text, spans, message.stopped, footer,
                          reply.note, saved=True, problem=problem, runs_changed=runs_changed)

    def _unsaved(self, reply: StreamingReply, stopped: bool, error: StorageError, also: str = "") -> ReplyEnded:
        """The database refused the ended reply: it stays on screen, drawn from memory, and the chat is read again
        before its next reply (what is stored of it is unsure)."""
        reply.chat.stale = True
        problem = (f"{also + ' ' if also else ''}The reply could not be saved ({error}). It is still on screen: copy "
                   "it before closing this chat.")
        return ReplyEnded(reply.conversation_id, reply.message_id, reply.text, reply.spans, stopped,
                          "not saved", reply.note, saved=False, problem=problem)
