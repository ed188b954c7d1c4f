"""Drafting from the user's own history: a suffix-match index over the replies already written (SuffixDecoding-style).

A local assistant is asked the same kinds of things again and again (the same e-mail rewritten, the same code
explained, a reply regenerated), and the target answers them in its own recurring phrases. Prompt lookup only sees
the current context; this index sees every earlier reply. Like prompt lookup it costs no model: it proposes what
followed the longest earlier occurrence of the context's final n-gram, and its proposals are verified by the target
like any draft, so what the user reads is exactly the target's output (a history that proposes nonsense only costs
time).

The match, defined (and tested against this definition by brute force, in tests/engine/test_history.py): over every indexed document, find the
largest n (min_ngram <= n <= max_ngram) such that the context's last n tokens occur contiguously in a document and
are followed there by at least one token; among the occurrences of that n-gram take the one in the most recently
added document, latest in it; propose the up to k tokens that follow it (never crossing into another document).

How: every position is filed under the bigram that ends there (a dict from the pair to its positions, oldest first);
a query takes the positions of the context's final bigram (the newest `max_candidates` of them) and extends each
match backwards with numpy, a few comparisons per position, as prompt lookup does. Documents are stored back to back,
each followed by a separator that matches no token, so a match never spans two replies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

SEPARATOR = -1  # between documents: no token id is negative, so no n-gram runs across it


@dataclass(frozen=True)
class HistoryMatch:
    length: int  # tokens of the context's end that matched (the length of its acceptance class)
    tokens: list[int]  # what followed the match, at most k tokens


class SuffixIndex:
    """Past replies, queried for the longest earlier occurrence of a context's final n-gram."""

    def __init__(self, max_ngram: int = 32, min_ngram: int = 2, max_candidates: int = 256,
                 max_tokens: int = 1_000_000):
        if not 2 <= min_ngram <= max_ngram:
            raise ValueError("need 2 <= min_ngram <= max_ngram (matches are found through their final bigram)")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.max_candidates = max_candidates  # the newest occurrences of a bigram that a query looks at
        self.max_tokens = max_tokens  # beyond this the oldest documents are forgotten
        self._clear()

    def _clear(self) -> None:
        self._buffer = np.full(1024, SEPARATOR, dtype=np.int64)
        self._length = 0
        self._documents: list[tuple[int, int]] = []  # (start, end) in the buffer, oldest first
        self._tokens = 0  # tokens in those documents (kept, not summed: add() checks it for every reply)
        self._positions: dict[tuple[int, int], list[int]] = {}  # final bigram -> buffer index of its 2nd token

    @property
    def token_count(self) -> int:
        return self._tokens

    def add(self, tokens: Sequence[int]) -> None:
        """Index one document (a finished reply's token ids)."""
        tokens = [int(t) for t in tokens]
        if len(tokens) < 2:
            return
        if any(t < 0 for t in tokens):
            raise ValueError("token ids are non-negative")
        if self.token_count + len(tokens) > self.max_tokens:
            self._forget_oldest(len(tokens))
        start = self._length
        end = start + len(tokens)
        self._reserve(end + 1)
        self._buffer[start:end] = tokens
        self._buffer[end] = SEPARATOR
        self._length = end + 1
        self._documents.append((start, end))
        self._tokens += end - start
        for i in range(start + 1, end):
            self._positions.setdefault((tokens[i - 1 - start], tokens[i - start]), []).append(i)

    def extend(self, documents: Iterable[Sequence[int]]) -> None:
        for tokens in documents:
            self.add(tokens)

    def match(self, context: Sequence[int], k: int) -> HistoryMatch | None:
        """The longest match of the context's end and up to k tokens that followed it (see the module's definition),
        or None when not even min_ngram tokens match."""
        if k < 1 or len(context) < self.min_ngram:
            return None
        positions = self._positions.get((int(context[-2]), int(context[-1])))
        if not positions:
            return None
        ends = np.asarray(positions[-self.max_candidates:], dtype=np.int64)
        ends = ends[self._buffer[ends + 1] != SEPARATOR]  # it must be followed by a token of the same document
        if len(ends) == 0:
            return None
        tail = np.asarray(context[-self.max_ngram:], dtype=np.int64)[::-1]  # tail[j]: j tokens before the end
        # a separator never equals a token, so no agreement runs back into the previous reply
        agree = backward_agreement(self._buffer, ends, tail, known=2, limit=min(self.max_ngram, len(tail)))
        n = int(agree.max())
        if n < self.min_ngram:
            return None
        end = int(ends[agree >= n][-1])  # positions are in insertion order: the last is the newest
        follow = self._buffer[end + 1 : end + 1 + k]
        stop = np.flatnonzero(follow == SEPARATOR)
        if len(stop):
            follow = follow[: stop[0]]
        return HistoryMatch(length=n, tokens=follow.tolist())

    def _reserve(self, size: int) -> None:
        if size > len(self._buffer):
            grown = np.full(max(size, 2 * len(self._buffer)), SEPARATOR, dtype=np.int64)
            grown[: self._length] = self._buffer[: self._length]
            self._buffer = grown

    def _forget_oldest(self, room: int) -> None:
        """Keep the newest documents that leave `room` tokens, in at most three quarters of the budget (so that
        re-indexing, which is linear, happens rarely)."""
        keep_budget = max(0, min(self.max_tokens - room, 3 * self.max_tokens // 4))
        kept: list[list[int]] = []
        total = 0
        for start, end in reversed(self._documents):
            if total + (end - start) > keep_budget:
                break
            kept.append(self._buffer[start:end].tolist())
            total += end - start
        self._clear()
        for tokens in reversed(kept):
            self.add(tokens)


def backward_agreement(sequence: np.ndarray, ends: np.ndarray, tail: np.ndarray, known: int,
                       limit: int) -> np.ndarray:
    """For each candidate end position e in `sequence` whose last `known` tokens are known to agree with the
    context's end, how many tokens back (at most `limit`) sequence[.. e] agrees with it: tail[j] is the context's
    j-th token from the end. All candidates at once, one numpy comparison per step back, dropping those that
    stopped agreeing."""
    agree = np.full(len(ends), known, dtype=np.int64)
    alive = np.ones(len(ends), dtype=bool)
    for back in range(known, limit):
        before = ends - back
        alive &= before >= 0
        alive[alive] = sequence[before[alive]] == tail[back]
        if not alive.any():
            break
        agree += alive
    return agree
