"""The model work of the chat and the race as jobs (workers.py's generic machinery): a chat reply streamed in
batches of steps, and a race's lanes. Only plain data crosses to the GUI thread: StepEvents and GenerationResults.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Generator, Sequence

from ..chats.reply_controller import ReplyJob
from ..core.vocabulary import CANCELLED
from ..engine.chat_engine import ChatEngine
from ..engine.chat_prompt import Message
from ..engine.decoding.events import GenerationResult, GenerationStats
from ..engine.decoding.speculative import GenerationConfig
from .workers import GeneratorWorker


def batched_reply(make_engine: Callable[[], ChatEngine], messages: Sequence[Message], system: str | None,
                  config: GenerationConfig, cancel: threading.Event,
                  on_result: Callable[[GenerationResult], None] | None = None,
                  batch_s: float = 0.02,
                  prompt_ids: Sequence[int] | None = None) -> Generator[list, None, GenerationResult | None]:
    """Streams one reply to `messages` in batches of steps, at most one batch every batch_s, and returns the reply.
    prompt_ids: the prompt already fitted (the chat fits it once, before the reply starts), streamed as it is
    (LocalChatEngine.stream_ids); None: the engine makes its prompt from the messages (a remote engine).

    Why batches: on llama.cpp a step is short, and a queued signal per step would wake the GUI thread (and take the
    GIL) far more often than the window can draw, on the cores the model's threads use (docs/performance.md, "The
    window against the engine"). make_engine and on_result run here, on the model thread: building an engine is
    torch work kept off the GUI thread, and on_result sees the finished reply before the window hears of it."""
    batch: list = []
    sent = 0.0  # the first step goes at once, so the reply starts showing as soon as it can
    engine = make_engine()
    events = (engine.stream(messages, system, config, cancel) if prompt_ids is None
              else engine.stream_ids(prompt_ids, config, cancel))
    for event in events:
        batch.append(event)
        now = time.perf_counter()
        if event.result is not None or now - sent >= batch_s:
            yield batch
            batch, sent = [], now
        if event.result is not None:
            if on_result is not None:
                on_result(event.result)
            return event.result
    return None


class GenerationWorker(GeneratorWorker):
    """A chat reply: yields lists of StepEvents (see batched_reply) and returns the GenerationResult. Stopped
    before it started, it returns a stopped reply with no tokens (of a prompt of prompt_tokens)."""

    BATCH_S = 0.02

    def __init__(self, make_engine: Callable[[], ChatEngine], messages: Sequence[Message], system: str | None,
                 config: GenerationConfig, cancel: threading.Event,
                 on_result: Callable[[GenerationResult], None] | None = None, prompt_tokens: int = 0,
                 prompt_ids: Sequence[int] | None = None):
        stopped = GenerationResult(text="", token_ids=(), origins=(), spans=(), finish_reason=CANCELLED,
                                   stats=GenerationStats(prompt_tokens=prompt_tokens), seed=config.seed or 0)
        messages = tuple(messages)
        super().__init__(lambda: batched_reply(make_engine, messages, system, config, cancel, on_result,
                                               self.BATCH_S, prompt_ids), cancel, if_not_run=stopped)

    @classmethod
    def for_job(cls, job: ReplyJob, cancel: threading.Event) -> GenerationWorker:
        """The worker of a reply the controller has started (ReplyController.start's job)."""
        return cls(job.make_engine, job.messages, job.system, job.config, cancel, on_result=job.on_result,
                   prompt_tokens=job.prompt_tokens, prompt_ids=job.prompt_ids)


class RaceWorker(GeneratorWorker):
    """A race: runs its lanes one after the other (engine.race.RaceRunner) and yields (lane, StepEvent) pairs; a
    lane's last event carries its result. A short race then yields (lane, Rerun) pairs as it runs the lanes again.
    Stopped before it started, it returns like a race stopped early: no lane finished, nothing to save."""

    def __init__(self, runner, messages: Sequence[Message], drafters: list[str], config: GenerationConfig,
                 cancel: threading.Event):
        messages = tuple(messages)
        super().__init__(lambda: runner.stream(messages, None, drafters, config, cancel), cancel, if_not_run=None)
