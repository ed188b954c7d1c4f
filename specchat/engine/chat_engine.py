"""The one engine interface: a reply to a conversation, streamed as step events.

Everything that answers a chat implements `ChatEngine.stream(messages, system, config, cancel)`: the local pair
(`LocalChatEngine`, here), a remote engine (`specchat.remote.RemoteEngine`), the API's served model
(`specchat.server.served.ServedModel`) and the benchmark's peers (`specchat.bench.peer_engine.PeerEngine`). The
chat, the race, the server and the benchmark call only that, and `reply_to` when they want the whole reply.

`EngineCache` keeps one SpeculativeEngine per drafter of a loaded pair, so that what an engine measures as it
runs (its cost curve and its acceptance per class: decoding/adaptive.py) carries over from reply to reply, whoever asks.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence

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


def fit_prompt(tokenizer, messages: Sequence[Message], system: str | None, window: int,
               max_new_tokens: int) -> FittedPrompt:
    """The prompt of the conversation's newest turns that fits `window` positions with room for a reply of up to
    max_new_tokens, of which at most a quarter of the window is kept, so that a long chat still reads most of
    itself. Nothing is deleted: the prompt is shorter, not the chat. PromptError when even the last message does
    not fit. Fitted anew at each call: a caller that needs the prompt twice (the chat shows what was left out, then
    streams it) keeps it and streams its ids (LocalChatEngine.stream_ids)."""
    ids, left_out = build_fitting_prompt(tokenizer, messages, system,
                                         window - min(max_new_tokens, window // 4))
    return FittedPrompt(tuple(ids), left_out)


def whole_prompt(tokenizer, messages: Sequence[Message], system: str | None) -> FittedPrompt:
    """The whole conversation's prompt, nothing left out (PromptError when it cannot be one)."""
    return FittedPrompt(tuple(build_prompt_ids(tokenizer, messages, system)))


class LocalChatEngine:
    """The loaded pair's SpeculativeEngine as a ChatEngine: the conversation through the target's chat template,
    fitted to its context window (fit_prompt), or with `whole_prompt` read whole, as the benchmark's peers read it
    and as a one-message prompt is (the engine then refuses one that does not fit, and a reply that reaches the
    window ends with finish_reason "context"). `stream_ids` runs token ids that are already a prompt (a
    completion's text, in the API)."""

    def __init__(self, engine: SpeculativeEngine, whole_prompt: bool = False):
        self.engine, self.whole_prompt = engine, whole_prompt
        self.tokenizer = engine.tokenizer

    def fit(self, messages: Sequence[Message], system: str | None, max_new_tokens: int) -> FittedPrompt:
        if self.whole_prompt:
            return whole_prompt(self.tokenizer, messages, system)
        return fit_prompt(self.tokenizer, messages, system, self.engine.context_window, max_new_tokens)

    def stream(self, messages: Sequence[Message], system: str | None, config: GenerationConfig,
               cancel: threading.Event | None = None) -> Iterator[StepEvent]:
        return self.stream_ids(self.fit(messages, system, config.max_new_tokens).ids, config, cancel)

    def stream_ids(self, prompt_ids: Sequence[int], config: GenerationConfig,
                   cancel: threading.Event | None = None) -> Iterator[StepEvent]:
        return self.engine.stream(prompt_ids, config, cancel)


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
        """engine()'s engine as a ChatEngine (reading the prompt whole when whole_prompt)."""
        return LocalChatEngine(self.engine(drafter, history, packed_weights, apart, checked), whole_prompt)

    def clear(self) -> None:
        """Drops every engine (and the memory they hold)."""
        self._engines.clear()
