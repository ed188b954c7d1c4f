"""Continuing a reply cut short (Stop, the token limit, the context window, a kill): what it goes on from, and what
the continuation can promise. No Qt.

A reply goes on where it stopped when the model reads what it read then: the chat's prompt as the reply was started
from (planned and fitted again from the chat up to the reply's question), then the reply's own token ids, stored
with its text. The engine reads those tokens as the reply's own steps did (SpeculativeEngine.stream's `continuing`),
so a greedy reply continued on kernels whose passes are bit-identical to one-token passes is, token for token, the
reply that was never cut. Where that cannot hold, the continuation says what it is instead (run_book.CONTINUED):
- sampled: a sample's random draws cannot be replayed, so the rest is drawn from the same distribution;
- the fastest kernels (Settings → Exactness): rounding may differ, the same distribution;
- its tokens were not kept (a reply from before they were stored, an import) or another model wrote them: its text
  is tokenized again, so the model reads the same text, not necessarily the same tokens ("same text, re-read");
- its prompt changed since (the system prompt, a document, the reply length setting), or the reply fills the context
  window so that older messages are left out to make room: the same text after another prompt, re-read too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.errors import ContinueError, PromptError
from ..core.vocabulary import BIT_IDENTICAL, CANCELLED, CONTEXT, DISTRIBUTION, INTERRUPTED, LENGTH
from ..engine.chat_engine import FittedPrompt, PromptFitter
from ..engine.chat_prompt import reply_text_ids
from ..storage.records import MessageInfo, StoredReply
from .context_plan import PromptPlan, Search
from .conversations import OpenChat
from .run_context import RunContext

CONTINUABLE = (CANCELLED, LENGTH, CONTEXT, INTERRUPTED)  # the endings a reply goes on from (Stop saves "cancelled")
MIN_PROMPT_ROOM = 64  # positions a prompt needs beside a reply that fills the window, or the reply cannot go on

NOT_KEPT = ("Its tokens were not kept with it (a reply from an older version or another model): its text is read "
            "again, so the continuation follows the same text, not necessarily the same tokens.")
PROMPT_CHANGED = ("The chat's prompt has changed since this reply was written (its system prompt, a document or the "
                  "reply length setting): the continuation reads the reply after the new prompt.")
NO_ROOM = ("This reply fills most of the model's context window: older messages are left out so that it can go on, "
           "so the continuation reads another prompt than the reply did.")
RE_READ_BEFORE = "A part of this reply was itself continued from its text read again."
SAMPLED = "A sampled reply cannot replay its random draws: the continuation is drawn from the same distribution."
FASTEST_KERNELS = ("On the fastest kernels (Settings → Exactness) rounding may differ: the continuation follows the "
                   "same distribution as the reply never cut.")


def can_continue(message: MessageInfo | None) -> bool:
    """Whether the reply `message` was cut short with text to go on from (the window offers Continue under the
    chat's last reply when it was)."""
    return (message is not None and message.role == "assistant" and message.finish_reason in CONTINUABLE
            and bool(message.text))


@dataclass(frozen=True)
class Continuation:
    """How a reply goes on: its prompt (fitted from `plan`, the chat up to the reply's question), the tokens read
    after it (`written`: the reply's own when `own`, so that its text is what they decode to; else its text
    tokenized again), what the continuation promises against the reply never cut (`exactness`: BIT_IDENTICAL or
    DISTRIBUTION; None: nothing, its text is re-read), and `note`, why it is not bit-identical ("" when it is), for
    the user."""

    plan: PromptPlan
    prompt: FittedPrompt
    written: tuple[int, ...]
    own: bool
    exactness: str | None
    note: str = ""


def plan_continuation(chat: OpenChat, stored: StoredReply, prompts: PromptFitter, context: RunContext,
                      search: Search | None = None) -> Continuation:
    """How `stored`, the last reply of `chat`, goes on with `context` on the model whose fitter is `prompts`: its
    prompt planned and fitted again as ReplyController.start did (with room for max_new_tokens more tokens), its
    tokens and what it promises. Where the reply leaves no room in the window beside its prompt (it ended at the
    window), the prompt is fitted to what is left, leaving older messages out. ContinueError when nothing of the
    chat fits beside the reply; PromptError from the fitter otherwise."""
    own = stored.token_ids is not None and bool(stored.runs) and all(
        run.target == context.models.target for run in stored.runs)
    written = stored.token_ids if own else tuple(reply_text_ids(prompts.tokenizer, stored.message.text))
    asked = replace(chat, messages=chat.messages[:-1])  # the chat up to the reply's question
    max_new = context.config.max_new_tokens
    plan = asked.plan(prompts, max_new, search)
    prompt = prompts.fit(plan.messages, chat.system_prompt, max_new)
    replanned = len(prompt.ids) + len(written) >= prompts.window
    if replanned:
        room = replace(prompts, window=prompts.window - len(written))
        if room.window < MIN_PROMPT_ROOM:
            raise ContinueError("this reply fills the model's context window by itself: it cannot go on (start a "
                                "new chat, or ask for the rest)")
        try:
            plan = asked.plan(room, max_new, search)
            prompt = room.fit(plan.messages, chat.system_prompt, max_new)
        except PromptError as error:
            raise ContinueError(f"this reply leaves too little of the context window for its question: {error}") \
                from error
    exactness, note = _promise(stored, context, own, len(prompt.ids), replanned)
    return Continuation(plan, prompt, tuple(written), own, exactness, note)


def _promise(stored: StoredReply, context: RunContext, own: bool, prompt_tokens: int,
             replanned: bool) -> tuple[str | None, str]:
    """What the continuation promises against the reply never cut, and why it is not bit-identical ("" when it
    is): its own tokens after the same prompt (the first part's length: its prompt as read then), greedy in every
    part, on bit-identical kernels in every part."""
    if not own:
        return None, NOT_KEPT
    if replanned:
        return None, NO_ROOM
    if prompt_tokens != stored.runs[0].prompt_tokens:
        return None, PROMPT_CHANGED
    if any(run.exactness is None for run in stored.runs):
        return None, RE_READ_BEFORE
    if context.config.sampling.temperature > 0 or any(run.temperature > 0 for run in stored.runs):
        return DISTRIBUTION, SAMPLED
    if context.models.exactness != BIT_IDENTICAL or any(run.exactness != BIT_IDENTICAL for run in stored.runs):
        return DISTRIBUTION, FASTEST_KERNELS
    return BIT_IDENTICAL, ""
