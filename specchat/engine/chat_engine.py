"""The one engine interface: a reply to a conversation, streamed as step events.

Everything that answers a chat implements `ChatEngine.stream(messages, system, config, cancel)`: the local pair
(`LocalChatEngine`, here), a remote engine (`specchat.remote.RemoteEngine`), the API's served model
(`specchat.server.served.ServedModel`) and the benchmark's peers (`specchat.bench.peer_engine.PeerEngine`). The
chat, the race, the server and the benchmark call only that, and `reply_to` when they want the whole reply.

`EngineCache` keeps one SpeculativeEngine per drafter of a loaded pair, so that what an engine measures as it
runs (its cost curve and its acceptance per class: decoding/adaptive.py) carries over from reply to reply, whoever asks.
`PromptFitter` is the one place a conversation is made a prompt and fitted to a context window: the local engines'
`fit`, and the chat's (ChatSession.reply_engine, through EngineCache.fitter), which fits before its engine is built.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence

from .chat_prompt import Message, build_fitting_prompt, build_prompt_ids
from .decoding.events import GenerationResult, StepEvent
from .decoding.speculative import GenerationConfig, SpeculativeEngine


class ChatEngine(Protocol):
    """Anything that answers a conversation."""

    def stream(self, messages: Sequence[Message], system: str | None, config: GenerationConfig,
               cancel: threading.Event | None = None) -> Iterator[StepEvent]:
        """One StepEvent per step of the reply to `messages` (ending with a user turn) under the system prompt
        `system`; the last event has finish_reason and result set. A set `cancel` ends the reply early, with
        finish_reason "cancelled"."""
        ...


def reply_to(engine: ChatEngine, messages: Sequence[Message], system: str | None, config: GenerationConfig,
             cancel: threading.Event | None = None,
             on_event: Callable[[StepEvent], None] | None = None) -> GenerationResult:
    """The whole reply of `engine.stream`, each event passed to `on_event` first (printing, progress)."""
    for event in engine.stream(messages, system, config, cancel):
        if on_event is not None:
            on_event(event)
        if event.result is not None:
            return event.result
    raise RuntimeError("the reply ended without a result")  # a ChatEngine's stream always ends with one


@dataclass(frozen=True)
class FittedPrompt:
    """A conversation's prompt: its token ids, and how many of its oldest messages were left out to fit."""

    ids: tuple[int, ...]
    left_out: int = 0


@dataclass(frozen=True)
class PromptFitter:
    """The one place a conversation becomes a model's prompt: through the chat template of `tokenizer`, fitted to
    `window` positions (the model's context window), or read whole (`whole`: the race's and the benchmark's
    prompts, as the benchmark's peers read them, and a one-message prompt, which the engine refuses when it does not
    fit). It needs no engine: the chat fits its prompt with its pair's (EngineCache.fitter) on the GUI thread,
    before the engine is built on the model thread, and the engine's own `fit` is this same fitter."""

    tokenizer: Any
    window: int
    whole: bool = False

    def fit(self, messages: Sequence[Message], system: str | None, max_new_tokens: int) -> FittedPrompt:
        """The prompt of the conversation (`messages` under the system prompt `system`) for a reply of up to
        max_new_tokens. Fitted: its newest turns that fit the window with room for the reply, of which at most a
        quarter of the window is kept, so that a long chat still reads most of itself; nothing is deleted, the
        prompt is shorter, not the chat. Whole: every message. PromptError when even the last message does not fit
        (or, whole, cannot be a prompt). Fitted anew at each call: a caller that needs the prompt twice (the chat
        shows what was left out, then streams it) keeps it and streams its ids (LocalChatEngine.stream_ids)."""
        if self.whole:
            return FittedPrompt(tuple(build_prompt_ids(self.tokenizer, messages, system)))
        budget = self.window - min(max_new_tokens, self.window // 4)
        ids, left_out = build_fitting_prompt(self.tokenizer, messages, system, budget)
        return FittedPrompt(tuple(ids), left_out)


class LocalChatEngine:
    """The loaded pair's SpeculativeEngine as a ChatEngine: the conversation made a prompt by its PromptFitter
    (`prompts`: the target's chat template fitted to its context window, or read whole when whole_prompt; an
    EngineCache gives its pair's, else the engine's own window is used), then streamed. `stream_ids` runs token ids
    that are already a prompt (a completion's text, in the API; the chat's prompt, fitted before it starts)."""

    def __init__(self, engine: SpeculativeEngine, whole_prompt: bool = False, prompts: PromptFitter | None = None):
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.prompts = prompts or PromptFitter(engine.tokenizer, engine.context_window, whole_prompt)

    def fit(self, messages: Sequence[Message], system: str | None, max_new_tokens: int) -> FittedPrompt:
        """The prompt this engine reads for the conversation (its PromptFitter's fit)."""
        return self.prompts.fit(messages, system, max_new_tokens)

    def stream(self, messages: Sequence[Message], system: str | None, config: GenerationConfig,
               cancel: threading.Event | None = None) -> Iterator[StepEvent]:
        return self.stream_ids(self.fit(messages, system, config.max_new_tokens).ids, config, cancel)

    def stream_ids(self, prompt_ids: Sequence[int], config: GenerationConfig, cancel: threading.Event | None = None,
                   continuing: Sequence[int] = ()) -> Iterator[StepEvent]:
        """The reply to a prompt already made; `continuing`: the tokens of a reply to it cut short, to go on with
        (SpeculativeEngine.stream)."""
        return self.engine.stream(prompt_ids, config, cancel, continuing)


class EngineCache:
    """The engines of one loaded pair, one per (drafter, past-replies index, packed weights), built on first use
    and kept until the pair goes. Building is torch work: call it on the model thread.

    An engine built for a drafter that already has one (another past-replies index: the setting switched, or the
    race's history lane) starts with what that one measured (its cost curve and acceptance per class), so it does
    not draft blind for its first steps; one that read another past-replies index is dropped then (the index was
    replaced: switching the setting off and on builds a new one), so old indexes are not kept alive."""

    def __init__(self, pair):
        self.pair = pair  # engine.loading.pair.ModelPair
        # key -> (the past-replies index, held so that its id() in the key stays unique, and the engine)
        self._engines: dict[tuple, tuple[object, SpeculativeEngine]] = {}

    def engine(self, drafter: str, history=None, packed_weights: bool | None = None,
               apart: str = "", checked: bool = False) -> SpeculativeEngine:
        """The engine for `drafter` reading the past replies `history` (a SuffixIndex, or None). Engines asked
        for under different `apart` names share nothing, not even measurements (the benchmark's modes, each
        measured on its own). checked: the caller has run the pair's check_drafter (ModelPair.engine)."""
        key = (drafter, None if history is None else id(history), packed_weights, apart)
        if key not in self._engines:
            engine = self.pair.engine(drafter, packed_weights=packed_weights, history=history, checked=checked)
            siblings = [k for k in self._engines if (k[0], k[2], k[3]) == (drafter, packed_weights, apart)]
            if siblings:
                measured = self._engines[siblings[0]][1]
                engine.step_costs, engine.acceptance = measured.step_costs, measured.acceptance
            for stale in (k for k in siblings if k[1] is not None and history is not None):
                del self._engines[stale]  # read a past-replies index that this one replaces
            self._engines[key] = (history, engine)
        return self._engines[key][1]

    def chat_engine(self, drafter: str, history=None, packed_weights: bool | None = None, apart: str = "",
                    whole_prompt: bool = False, checked: bool = False) -> LocalChatEngine:
        """engine()'s engine as a ChatEngine, its prompts made by fitter(whole_prompt)."""
        return LocalChatEngine(self.engine(drafter, history, packed_weights, apart, checked),
                               prompts=self.fitter(whole_prompt))

    def fitter(self, whole_prompt: bool = False) -> PromptFitter:
        """How the pair's engines make a conversation their prompt: the target's chat template within the target's
        context window (ModelPair.context_window, the window its runners hold), or read whole. Builds no engine, so
        the chat fits its prompt with it on the GUI thread (ChatSession.reply_engine)."""
        return PromptFitter(self.pair.target.tokenizer, self.pair.context_window(), whole_prompt)

    def clear(self) -> None:
        """Drops every engine (and the memory they hold)."""
        self._engines.clear()
