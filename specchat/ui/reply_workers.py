"""The model work of the chat and the race as jobs (workers.py's generic machinery): a chat reply streamed in
batches of steps, one a frame at most (the reply path's one batching layer), and a race's lanes. Only plain data
crosses to the GUI thread: StepEvents, StepBatches and GenerationResults.
"""

from __future__ import annotations

import threading
import time
from typing import Generator, Sequence

from ..chats.reply_controller import ReplyJob, StepBatch
from ..core.vocabulary import CANCELLED
from ..engine.chat_prompt import Message
from ..engine.decoding.events import GenerationResult, GenerationStats
from ..engine.decoding.speculative import GenerationConfig
from .workers import GeneratorWorker

FRAME_S = 0.033  # a batch of steps at most this often: the window draws each batch as it comes, ~30 times a second


def frames(job: ReplyJob, cancel: threading.Event,
           frame_s: float = FRAME_S) -> Generator[StepBatch, None, GenerationResult | None]:
    """Streams the reply `job` describes in batches of steps (StepBatch), at most one batch every frame_s, and
    returns the reply's result (None: the stream ended without one). The job's prompt_ids are streamed as they
    are (LocalChatEngine.stream_ids: the chat fitted them once, before the reply started), with a continued
    reply's tokens after them (`continuing`); None: the engine makes its prompt from the messages (a remote engine). Each batch carries a copy of the statistics as of its last
    step, taken here while the engine waits: the events share the generation's one running GenerationStats.

    Why batches, and one layer of them: on llama.cpp a step is short, and a queued signal per step would wake the
    GUI thread (and take the GIL) far more often than the window can draw, on the cores the model's threads use
    (docs/performance.md, "The window against the engine"); the window draws each batch as it arrives, so this is
    the one place steps are gathered into frames. The job's make_engine and on_result run here, on the model thread:
    building an engine is torch work kept off the GUI thread, and on_result sees the finished reply before the
    window hears of it."""
    batch: list = []
    sent = 0.0  # the first step goes at once, so the reply starts showing as soon as it can
    if job.before is not None:
        job.before()  # a branch's siblings, read first by its drafting
    engine = job.make_engine()
    events = (engine.stream(job.messages, job.system, job.config, cancel) if job.prompt_ids is None
              else engine.stream_ids(job.prompt_ids, job.config, cancel, continuing=job.continuing)
              if job.continuing else engine.stream_ids(job.prompt_ids, job.config, cancel))
    for event in events:
        batch.append(event)
        now = time.perf_counter()
        if event.result is not None or now - sent >= frame_s:
            yield StepBatch(tuple(batch), event.stats.copy())
            batch, sent = [], now
        if event.result is not None:
            if job.on_result is not None:
                job.on_result(event.result)
            return event.result
    return None


class GenerationWorker(GeneratorWorker):
    """A chat reply, the job ReplyController.start made: yields StepBatches (frames) and returns the
    GenerationResult. Stopped before it started, it returns a stopped reply with no tokens (of a prompt of the
    job's prompt_tokens)."""

    def __init__(self, job: ReplyJob, cancel: threading.Event):
        stopped = GenerationResult(text="", token_ids=(), origins=(), spans=(), finish_reason=CANCELLED,
                                   stats=GenerationStats(prompt_tokens=job.prompt_tokens), seed=job.config.seed or 0)
        super().__init__(lambda: frames(job, cancel), cancel, if_not_run=stopped)


class RaceWorker(GeneratorWorker):
    """A race: runs its lanes one after the other (engine.race.RaceRunner) and yields (lane, StepEvent) pairs; a
    lane's last event carries its result. A short race then yields (lane, Rerun) pairs as it runs the lanes again.
    Stopped before it started, it returns like a race stopped early: no lane finished, nothing to save."""

    def __init__(self, runner, messages: Sequence[Message], drafters: list[str], config: GenerationConfig,
                 cancel: threading.Event):
        messages = tuple(messages)
        super().__init__(lambda: runner.stream(messages, None, drafters, config, cancel), cancel, if_not_run=None)
