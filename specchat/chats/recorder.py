"""Saving a chat reply as it streams: its message row and its run row, from the placeholder written when it starts
to the finished, stopped or failed reply. No Qt: the window (ui/main_window.py) calls it and says what failed.

Every method raises StorageError when the database refuses a write that the reply cannot do without; the caller
decides what the user is told (the window shows a banner and keeps the reply on screen)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..engine.events import GenerationResult
from ..storage import StorageError
from ..storage.records import STREAMING
from .run_book import ReplyContext, RunBook

# What completes a finished reply's run: RunBook.complete's arguments (conversation id, message id, result, context,
# run id).
CompleteRun = Callable[[int, int, GenerationResult, ReplyContext, int], None]


@dataclass(frozen=True)
class RecordedReply:
    """A reply begun by ReplyRecorder.begin: its conversation, its message row, its run row, and what it runs with."""

    conversation_id: int
    message_id: int
    run_id: int
    context: ReplyContext


def stopped_by_user(result: GenerationResult) -> bool:
    """Whether the finished reply was cut short by Stop (it is then saved as stopped, with what it had)."""
    return result.finish_reason == "cancelled"


class ReplyRecorder:
    """Owns a chat reply's rows in the Store (store) while it streams and as it ends; its run goes through `runs`.

    complete_run records a finished reply's statistics: RunBook.complete unless given (ChatSession passes its
    record_run, which also tells the windows that the statistics changed)."""

    def __init__(self, store, runs: RunBook, complete_run: CompleteRun | None = None):
        self.store, self.runs = store, runs
        self.complete_run = complete_run or runs.complete

    def begin(self, conversation_id: int, prompt_tokens: int, seed: int, context: ReplyContext) -> RecordedReply:
        """Writes the reply's placeholder (an empty, stopped assistant message) and begins its run, both marked
        streaming until the reply ends: a kill leaves them so, and the next start marks them interrupted.

        Takes the conversation, the prompt's length in tokens, the reply's seed and what it runs with; returns
        where it is stored. Raises StorageError (a placeholder already written then stays, stopped and empty)."""
        placeholder = self.store.add_message(conversation_id, "assistant", "", stopped=True, finish_reason=STREAMING)
        run_id = self.runs.begin(conversation_id, placeholder.id, prompt_tokens, seed, context)
        return RecordedReply(conversation_id, placeholder.id, run_id, context)

    def partial(self, reply: RecordedReply, text: str, spans: list, stats: dict) -> None:
        """Saves the reply so far: its text, its spans (ReplySpans.to_json()) and its run's figures so far
        (GenerationStats.to_dict()), in one transaction, so that a kill loses at most what came since.

        Raises StorageError; the reply goes on streaming, and the next partial save tries again."""
        self.store.save_partial_reply(reply.message_id, text, spans, reply.run_id, stats)

    def finish(self, reply: RecordedReply, result: GenerationResult, spans: list) -> None:
        """Saves the ended reply (finished, or stopped by the user: stopped_by_user) with its spans, then completes
        its run; a reply stopped before its first token measured nothing, and its run is deleted.

        Raises StorageError: the message, or its statistics, could not be saved (the message is saved first, so a
        failed statistics write keeps the reply)."""
        self.store.update_message(reply.message_id, text=result.text, spans=spans, stopped=stopped_by_user(result),
                                  finish_reason=result.finish_reason)
        if result.token_ids:
            self.complete_run(reply.conversation_id, reply.message_id, result, reply.context, reply.run_id)
        else:
            self.store.delete_run(reply.run_id)

    def fail(self, reply: RecordedReply, text: str, spans: list) -> None:
        """Saves what a failed reply had streamed (text and spans), stopped and ended by an error, and marks its
        run "error".

        Raises StorageError when the message cannot be saved. A run that cannot be marked is left alone: it stays
        "streaming", and the next start marks it interrupted."""
        self.store.update_message(reply.message_id, text=text, spans=spans, stopped=True, finish_reason="error")
        try:
            self.store.update_run(reply.run_id, {"finish_reason": "error"})
        except StorageError:
            pass
