"""The benchmark's other engines behind our ChatEngine interface: llama.cpp's (llama-cpp-python's loop, peers.py;
llama-server, peer_server.py) and transformers' generate(). Each takes prompt token ids and gives reply token ids;
`PeerEngine` turns the conversation into the same prompt ids our modes read (the target's chat template, the whole
conversation: the runner's LocalChatEngines read it whole too) and the reply into one StepEvent, so the runner calls one `stream` for every mode.

A peer's reply has no steps of ours: its one event carries every token as the target's, and its figures are the
token counts and the wall time (prompt processing included), with llama-server's own draft counters kept in
`last` beside it."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from ..core.vocabulary import Origin
from ..engine.chat_prompt import Message, build_prompt_ids
from ..engine.decoding.events import GenerationResult, GenerationStats, StepEvent
from ..engine.decoding.speculative import GenerationConfig


@dataclass(frozen=True)
class PeerReply:
    """What a peer gave: its reply's token ids (the end token included, when reached) and wall time, and its draft
    counters when it reports them (llama-server's draft_n and draft_n_accepted; None otherwise)."""

    token_ids: list[int]
    wall_s: float
    draft_proposed: int | None = None
    draft_accepted: int | None = None


class PeerEngine:
    """A ChatEngine over `run(prompt_ids, max_new_tokens) -> PeerReply`, greedy as every benchmark mode."""

    def __init__(self, tokenizer, run: Callable[[list[int], int], PeerReply], close: Callable[[], None] = None):
        """close: what stops the peer (a llama-server process), called by close()."""
        self.tokenizer, self._run, self._close = tokenizer, run, close
        self.last: PeerReply | None = None  # the last reply's, set before its event is yielded

    def stream(self, messages: Sequence[Message], system: str | None, config: GenerationConfig,
               cancel: threading.Event | None = None) -> Iterator[StepEvent]:
        """One event with the whole reply: a peer cannot be stopped part-way, so `cancel` is not read."""
        prompt_ids = build_prompt_ids(self.tokenizer, messages, system)
        self.last = reply = self._run(prompt_ids, config.max_new_tokens)
        yield whole_reply(self.tokenizer, len(prompt_ids), reply, config)

    def close(self) -> None:
        if self._close is not None:
            self._close()


def whole_reply(tokenizer, prompt_tokens: int, reply: PeerReply, config: GenerationConfig) -> StepEvent:
    """A peer's reply as the last (and only) StepEvent of a stream: its text decoded as our replies are shown,
    without special tokens, and "length" or "eos" by whether it used the whole budget."""
    tokens = tuple(int(t) for t in reply.token_ids)
    text = tokenizer.decode(list(tokens), skip_special_tokens=True)
    stats = GenerationStats(prompt_tokens=prompt_tokens, new_tokens=len(tokens), wall_s=reply.wall_s,
                            draft_proposed=reply.draft_proposed or 0, draft_accepted=reply.draft_accepted or 0)
    finish = "length" if len(tokens) >= config.max_new_tokens else "eos"
    origins = (Origin.TARGET,) * len(tokens)
    result = GenerationResult(text=text, token_ids=tokens, origins=origins, spans=(), finish_reason=finish,
                              stats=stats, seed=config.seed or 0)
    return StepEvent(token_ids=tokens, origins=origins, spans=(), text_delta=text, text_offset=0,
                     rejected_ids=(), rejected_text="", stats=stats, wall_s=reply.wall_s, finish_reason=finish,
                     result=result)
