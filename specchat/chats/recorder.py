"""Saving a chat reply as it streams: its message row and its run row, from the placeholder written when it starts
to the finished, stopped or failed reply, and its run completed through the RunBook. No Qt: the reply controller
(reply_controller.py) calls it and says what failed. Every write returns what it wrote, so nothing is read back.

This is the reply's storage boundary: it takes the reply's spans (ReplySpans) and statistics (GenerationStats) as
the controller gathered them and makes their stored forms here, once per write (ReplySpans.to_json,
GenerationStats.to_dict); nothing upstream converts them.

Every method raises StorageError when the database refuses a write that the reply cannot do without; the caller
decides what the user is told (the window shows a banner and keeps the reply on screen)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ..core.errors import StorageError
from ..core.vocabulary import CANCELLED, ERROR, STREAMING
from ..engine.decoding.events import GenerationResult, GenerationStats
from ..storage.records import MessageInfo, RunRecord, StoredReply
from .reply_spans import ReplySpans
from .run_book import RunBook
from .run_context import RunContext


@dataclass(frozen=True)
class RecordedReply:
    """A reply begun by ReplyRecorder.begin: its placeholder message row and its run row as written (the run's id
    and record), and what it runs with."""

    message: MessageInfo
    run_id: int
    run: RunRecord
    context: RunContext

    @property
    def conversation_id(self) -> int:
        return self.message.conversation_id

    @property
    def message_id(self) -> int:
        return self.message.id


def stopped_by_user(result: GenerationResult) -> bool:
    """Whether the finished reply was cut short by Stop (it is then saved as stopped, with what it had)."""
    return result.finish_reason == CANCELLED


class ReplyRecorder:
    """Owns a chat reply's rows in the Store (store) while it streams and as it ends; its run goes through `runs`
    (the RunBook, which completes it)."""

    def __init__(self, store, runs: RunBook):
        self.store, self.runs = store, runs

    def begin(self, conversation_id: int, prompt_tokens: int, context: RunContext,
              sources: list | None = None) -> RecordedReply:
        """Writes the reply's placeholder (an empty, stopped assistant message) and begins its run, both marked
        streaming until the reply ends: a kill leaves them so, and the next start marks them interrupted.

        Takes the conversation, the prompt's length in tokens, what the reply runs with (its config's seed set)
        and what it was given of the chat's documents (sources, stored form); returns where it is stored. Raises
        StorageError (a placeholder already written then stays, stopped and empty)."""
        placeholder = self.store.add_message(conversation_id, "assistant", "", stopped=True, finish_reason=STREAMING)
        run_id, run = self.runs.begin(conversation_id, placeholder.id, prompt_tokens, context, sources)
        return RecordedReply(placeholder, run_id, run, context)

    def resume(self, message: MessageInfo, prompt_tokens: int, context: RunContext,
               sources: list | None = None) -> RecordedReply:
        """A reply cut short goes on (ReplyController.continue_reply): its message, kept as it is, is marked
        streaming again, and a run of its own begins for the continuation (the reply's earlier runs stay: the
        statistics keep every part). Takes what begin takes, with the message instead of its chat, and
        prompt_tokens counting the reply's earlier tokens, read after the prompt. Raises StorageError."""
        resumed = self.store.update_message(message.id, stopped=True, finish_reason=STREAMING)
        run_id, run = self.runs.begin(message.conversation_id, message.id, prompt_tokens, context, sources)
        return RecordedReply(resumed, run_id, run, context)

    def stored(self, message_id: int) -> StoredReply:
        """The reply as continuing it needs it: with its token ids and its runs (Store.stored_reply). Raises
        StorageError."""
        return self.store.stored_reply(message_id)

    def sibling_replies(self, reply: RecordedReply) -> list[str]:
        """The replies beside this one in its chat's tree (ChatTree.sibling_replies), oldest first; [] when they
        cannot be read (only drafting reads them: the reply goes on all the same)."""
        try:
            return self.store.tree.sibling_replies(reply.conversation_id, reply.message_id)
        except StorageError:
            return []

    def partial(self, reply: RecordedReply, text: str, spans: ReplySpans, stats: GenerationStats,
                token_ids: Sequence[int] | None = None) -> RunRecord:
        """Saves the reply so far: its text, its spans, its token ids (None: not kept, a remote engine's) and its
        run's figures so far (stats), in one transaction, so that a kill loses at most what came since. Returns the
        run as it now stands (what a failed reply's footer says).

        Raises StorageError; the reply goes on streaming, and the next partial save tries again."""
        figures = stats.to_dict()
        self.store.save_partial_reply(reply.message_id, text, spans.to_json(), reply.run_id, figures, token_ids)
        return replace(reply.run, **RunRecord.figures(figures))

    def finish(self, reply: RecordedReply, result: GenerationResult, spans: ReplySpans, text: str | None = None,
               token_ids: Sequence[int] | None = None) -> tuple[MessageInfo, RunRecord | None]:
        """Saves the ended reply (finished, or stopped by the user: stopped_by_user) with its spans, its text (None:
        the result's) and its token ids (None: not kept), then completes its run (RunBook.complete, with the
        result's statistics); a reply stopped before its first token measured nothing, and its run is deleted.

        Returns the message and the run as written (None: deleted). Raises StorageError: the message, or its
        statistics, could not be saved (the message is saved first, so a failed statistics write keeps the reply)."""
        message = self.store.update_message(reply.message_id, text=result.text if text is None else text,
                                            spans=spans.to_json(), stopped=stopped_by_user(result),
                                            finish_reason=result.finish_reason, token_ids=token_ids)
        if not result.token_ids:
            self.store.delete_run(reply.run_id)
            return message, None
        return message, self.runs.complete(reply.conversation_id, reply.message_id, result, reply.context,
                                           reply.run_id, reply.run.sources)

    def fail(self, reply: RecordedReply, text: str, spans: ReplySpans,
             token_ids: Sequence[int] | None = None) -> tuple[MessageInfo, bool]:
        """Saves what a failed reply had streamed (text, spans and token ids: None, not kept), stopped and ended by
        an error, and marks its run "error". Returns the message as written and whether the run was marked.

        Raises StorageError when the message cannot be saved. A run that cannot be marked is left alone: it stays
        "streaming", and the next start marks it interrupted."""
        message = self.store.update_message(reply.message_id, text=text, spans=spans.to_json(), stopped=True,
                                            finish_reason=ERROR, token_ids=token_ids)
        try:
            self.store.update_run(reply.run_id, {"finish_reason": "error"})
        except StorageError:
            return message, False
        return message, True
