"""Prompt lookup (Saxena 2023): drafting by copying what followed an earlier occurrence of the text's end, from the
context and, for the "history" drafter, from the user's past replies. Model-free: a proposal costs no forward pass.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...core.vocabulary import HISTORY
from .base import PAST_REPLIES, PROMPT, RESUMED, AcceptanceClass, Draft, Drafter
from .past_replies import SuffixIndex, backward_agreement


COPY_MATCH = 6  # a match this long is a copy in progress
RESUME_WITHIN = 4  # _resumed_copy: the tokens since the copy broke off (an edit) that it looks back over
RESUME_SLACK = 4  # _resumed_copy: how far from a one-for-one place the copy may be found again


class PromptLookupDrafter(Drafter):
    """Model-free drafting: where the context's end occurred before, propose what followed it.

    Replies often copy spans of the prompt (editing, summarising, extracting, code) or of themselves. The lookup is
    a suffix-tree query done over an occurrence index: every earlier occurrence of the context's last token is
    extended backwards (numpy, all at once) to find the longest suffix of the context that occurred before, up to
    `max_ngram` tokens, and every occurrence of that suffix. The continuations of those occurrences form the
    subtree of the suffix's node: the proposal follows it while the occurrences agree (continuation()), so its
    length is as long as the evidence, and a copy may run on over what it is copying (a repeated pattern). The
    longer the match, the likelier the copy goes on: the match length is the draft's acceptance class
    (context_class), and the draft-length policy chooses how much of the proposal to check.

    A reply that copies with edits (a proofread text, a fixed function) breaks its copy at every edit, and then the
    context's end matches only a token or two, anywhere in the text. There the lookup takes the copy up where the
    edit left it (_resumed_copy): a match that short is ambiguous, and the copy in progress says where to look.
    """

    name = "pld"

    def __init__(self, max_ngram: int = 64, min_ngram: int = 1, history: SuffixIndex | None = None):
        """history: also look in the user's past replies (the "history" drafter); the longer match wins, the
        context on a tie."""
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.history = history
        if history is not None:
            self.name = HISTORY

    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        draft = self._from_context(context, k)
        if self.history is None or k < 1:
            return draft
        found = self.history.match(context, k)
        if found is None or not found.tokens or (draft is not None and draft.match_length >= found.length):
            return draft
        return Draft(tokens=found.tokens, acceptance_class=history_class(found.length), match_length=found.length)

    def _from_context(self, context: Sequence[int], k: int) -> Draft | None:
        """The continuation of the longest earlier occurrence of the context's end (max_ngram down to min_ngram
        tokens) that is followed by at least one token, as far as its occurrences agree; where that match is
        shorter than COPY_MATCH tokens, the interrupted copy's continuation instead, when there is one."""
        ids = np.asarray(context, dtype=np.int64)
        if len(ids) < 2 or k < 1:
            return None
        draft = self._longest_match(ids, k)
        if draft is not None and draft.match_length >= COPY_MATCH:
            return draft
        resumed = self._resumed_copy(ids, k)
        if resumed is None or (draft is not None and resumed.acceptance_class.length == 0):
            return draft
        return resumed

    def _longest_match(self, ids: np.ndarray, k: int) -> Draft | None:
        """The continuation of the longest earlier occurrence of the context's end (see _from_context)."""
        ends, agree = self._agreement(ids, len(ids) - 1)
        n = int(agree.max()) if len(ends) else 0
        if n < self.min_ngram:
            return None
        tokens = continuation(ids, ends[agree >= n] + 1, k)
        return Draft(tokens=tokens, acceptance_class=context_class(n), match_length=n)

    def _agreement(self, ids: np.ndarray, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(ends, agree): every earlier position of ids[end], and how many tokens back from each the text agrees
        with ids[..end]'s end (at most max_ngram). Every earlier occurrence of an n-gram ending at `end` ends at an
        earlier copy of its last token: one pass over the text and a few over those copies, far less work than
        comparing every window once per n."""
        ends = np.flatnonzero(ids[:end] == ids[end])
        tail = ids[end::-1][: self.max_ngram]  # the n-gram must end before `end`
        return ends, backward_agreement(ids, ends, tail, known=1, limit=min(self.max_ngram, end))

    def _resumed_copy(self, ids: np.ndarray, k: int) -> Draft | None:
        """Where a copy of COPY_MATCH or more tokens ran until at most RESUME_WITHIN tokens before the context's
        end (an edit since), the copied text's continuation from where the edit likely left it: after the
        occurrence of the context's last token nearest to its place in a copy one for one (within RESUME_SLACK
        positions; class RESUMED 1), else, the last token being new there, after the copied token it replaced
        (class RESUMED 0). None where no such copy ran."""
        size = len(ids)
        for back in range(1, min(RESUME_WITHIN, size - 2) + 1):
            length, source_end = self._latest_longest(ids, size - 1 - back)
            if length >= COPY_MATCH:
                break
        else:
            return None
        expected = source_end + back  # where the context's last token sits in the copied text, one for one
        copied_end = size - 1 - back  # the copy's last token before the edit: the text it copied lies before it
        near = np.arange(max(source_end + 1, expected - RESUME_SLACK), min(expected + RESUME_SLACK + 1, copied_end))
        found = near[ids[near] == ids[-1]]
        if len(found):
            start, length = int(found[np.argmin(np.abs(found - expected))]) + 1, 1
        else:
            start, length = expected + 1, 0
            if start >= copied_end:
                return None
        tokens = continuation(ids, np.array([start]), k)
        return Draft(tokens=tokens, acceptance_class=AcceptanceClass(RESUMED, length), match_length=length)

    def _latest_longest(self, ids: np.ndarray, end: int) -> tuple[int, int]:
        """(n, e): the longest earlier match of ids[..end]'s last tokens, n of them (at most max_ngram), ending at
        e (the latest such match); (0, -1) where ids[end] did not occur before."""
        ends, agree = self._agreement(ids, end)
        if len(ends) == 0:
            return 0, -1
        n = int(agree.max())
        return n, int(ends[np.flatnonzero(agree == n)[-1]])


def continuation(ids: np.ndarray, starts: np.ndarray, k: int) -> list[int]:
    """Up to k tokens that follow the occurrences starting at `starts` (the positions after them, oldest first):
    token by token, the one most of the occurrences still in agreement continue with, as long as it is more than
    half of them; the occurrences that continue otherwise drop out. Where they disagree on the first token, the
    latest occurrence is followed (as plain prompt lookup does). With one occurrence left it is copied on, and a copy that reaches the context's end goes on over the tokens it has
    proposed (the text repeats with the period of the distance between its occurrence and the end)."""
    size = len(ids)
    tokens: list[int] = []
    alive = starts[::-1]  # newest first
    while len(tokens) < k and len(alive) > 1:
        at = alive + len(tokens)
        nexts = ids[np.minimum(at, size - 1)]
        beyond = at >= size  # a position past the end reads the proposal itself (an overlapping copy)
        if beyond.any():
            nexts[beyond] = [tokens[a - size] for a in at[beyond]]
        values, counts = np.unique(nexts, return_counts=True)
        best = counts.max()
        winner = values[np.argmax(counts)]
        if 2 * best <= len(alive):  # the occurrences disagree: no continuation has the evidence
            if tokens:
                break
            alive = alive[:1]  # nothing proposed yet: the latest occurrence's, as plain prompt lookup would
            break
        tokens.append(int(winner))
        alive = alive[nexts == winner]
    if len(alive) == 1 and len(tokens) < k:
        start = int(alive[0])
        for j in range(len(tokens), k):
            at = start + j
            tokens.append(int(ids[at]) if at < size else tokens[at - size])
    return tokens


def context_class(length: int) -> AcceptanceClass:
    """The acceptance class of a context match of `length` tokens: exact up to 8, then 12 (9-15), 16 (16-31) and
    32 (32 or more). Past a few tokens a match is a copy in progress, and longer copies go on longer."""
    return AcceptanceClass(PROMPT, length if length <= 8 else 12 if length < 16 else 16 if length < 32 else 32)


def history_class(length: int) -> AcceptanceClass:
    """The acceptance class of a match of `length` tokens in past replies: its length exact up to 8, then 12
    (9-15) and 16 (16 or more). A match that long is the same request again far more often than a shared phrase,
    and its own class keeps the phrases' failures (a shared opening, then another answer) from stopping it."""
    return AcceptanceClass(PAST_REPLIES, length if length <= 8 else 12 if length < 16 else 16)
