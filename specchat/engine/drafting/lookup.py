"""Prompt lookup (Saxena 2023): drafting by copying what followed an earlier occurrence of the text's end, from the
context and, for the "history" drafter, from the user's past replies. Model-free: a proposal costs no forward pass.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..history import SuffixIndex, backward_agreement
from .base import CONTEXT, HISTORY, AcceptanceClass, Draft, Drafter


class PromptLookupDrafter(Drafter):
    """Model-free drafting (Saxena 2023): if the last n tokens occurred before, propose what followed them.

    Replies often copy spans of the prompt (editing, summarising, extracting, code) or of themselves, so the
    continuation of the most recent earlier match of the longest suffix n-gram is a good guess, and costs no model.
    The longer the match, the likelier the copy goes on: the match length is the draft's acceptance class.
    """

    name = "pld"

    def __init__(self, max_ngram: int = 6, min_ngram: int = 1, history: SuffixIndex | None = None):
        """history: also look in the user's past replies (the "history" drafter); the longer match wins, the
        context on a tie."""
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.history = history
        if history is not None:
            self.name = "history"

    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        draft = self._from_context(context, k)
        if self.history is None or k < 1:
            return draft
        found = self.history.match(context, k)
        if found is None or not found.tokens or (draft is not None and draft.acceptance_class.length >= found.length):
            return draft
        return Draft(tokens=found.tokens, acceptance_class=history_class(found.length))

    def _from_context(self, context: Sequence[int], k: int) -> Draft | None:
        """The tokens after the latest earlier occurrence of the longest suffix n-gram (max_ngram down to
        min_ngram) that is followed by at least one token."""
        ids = np.asarray(context, dtype=np.int64)
        if len(ids) < 2 or k < 1:
            return None
        # Every earlier occurrence of the final n-gram ends at an earlier copy of the last token: measure, at each
        # such copy, how many tokens back it agrees with the context's end (at most max_ngram). One pass over the
        # context and a few over those copies, far less work than comparing every window once per n.
        ends = np.flatnonzero(ids[:-1] == ids[-1])
        if len(ends) == 0:
            return None
        tail = ids[::-1][: self.max_ngram]  # the n-gram must end before the last token
        agree = backward_agreement(ids, ends, tail, known=1, limit=min(self.max_ngram, len(ids) - 1))
        n = int(agree.max())
        if n < self.min_ngram:
            return None
        end = int(ends[agree >= n][-1])  # the latest occurrence of the longest match
        return Draft(tokens=ids[end + 1 : end + 1 + k].tolist(), acceptance_class=AcceptanceClass(CONTEXT, n))


def history_class(length: int) -> AcceptanceClass:
    """The acceptance class of a match of `length` tokens in past replies: its length exact up to 8, then 12
    (9-15) and 16 (16 or more). A match that long is the same request again far more often than a shared phrase,
    and its own class keeps the phrases' failures (a shared opening, then another answer) from stopping it."""
    return AcceptanceClass(HISTORY, length if length <= 8 else 12 if length < 16 else 16)
