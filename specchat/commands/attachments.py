"""`--attach FILE` for `specchat generate` and `specchat chat` (the option itself: options.attach_option): files read
into documents (documents/reading.py), and the prompt planned with them as the window plans it
(chats/context_plan.py): whole when they fit, else the passages that best match the question, ranked in memory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from ..chats.context_plan import ChatDocument, PromptPlan, counter_for, plan_in_memory
from ..core.text import visible_name
from ..engine.chat_prompt import Message


def read_attachments(paths: Sequence[Path], message_id: int = 0) -> list[ChatDocument]:
    """The files read into documents, attached to the message `message_id` (the first: 0), each with a distinct
    document id (its place in `paths`, from 1). DocumentError, with the file's name and what to do, for a file that
    cannot be read."""
    from ..documents.reading import read_document

    documents = []
    for number, path in enumerate(paths, 1):
        print(f"Reading {visible_name(path.name)}…", file=sys.stderr, flush=True)
        documents.append(ChatDocument(number, message_id, read_document(path)))
    return documents


def plan_with_documents(pair, turns: Sequence[Message], ids: Sequence[int | None],
                        documents: Sequence[ChatDocument], system: str | None, max_new_tokens: int) -> PromptPlan:
    """The plan of the prompt for `turns` with `documents` in the pair's context window (its target's tokenizer):
    context_plan.plan_in_memory, the rule the server applies too. PromptError when the question alone does not fit."""
    return plan_in_memory(turns, ids, documents, system, counter_for(pair.target.tokenizer), pair.context_window(),
                          max_new_tokens)


def sources_line(plan: PromptPlan) -> str:
    """What the reply was given, for the terminal: "Sources: report.pdf, p. 3 · notes.txt (2 passages) · …", in
    the plan's order, the passages of one label counted once, each name as visible_name shows it ("" without
    documents)."""
    counts: dict[str, int] = {}
    for source in plan.sources:
        counts[source.label] = counts.get(source.label, 0) + 1
    shown = [visible_name(label) + (f" ({count} passages)" if count > 1 else "") for label, count in counts.items()]
    return ("Sources: " + " · ".join(shown)) if shown else ""
