"""The reply being built: tokens, their origins and text spans, and the stop conditions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ...core.vocabulary import EOS, LENGTH, STOP, Origin
from .detokenize import IncrementalDetokenizer


@dataclass
class Emission:
    """Tokens released to listeners by one append (text they cover is contiguous, starting at text_offset)."""

    token_ids: list[int] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    text_delta: str = ""
    text_offset: int = 0


class Reply:
    """Accumulates generated tokens and decides when generation must stop (EOS, stop string, token limit).

    With stop strings set, text that could still turn into a stop string is held back, together with the tokens
    that produced it, so that listeners never see text that is later cut off.

    A reply that goes on from one cut short (`before`: its tokens, already shown) starts with their text: `text` is
    the whole reply's, `text_start` where the new tokens' text begins in it, and the new tokens' spans and emissions
    are in the whole text's offsets; token_ids, origins and spans hold the new tokens only, and max_new_tokens
    counts them alone. Decoding the earlier tokens first gives the first new token its context (a leading space, the
    rest of a character that the cut split).
    """

    def __init__(self, tokenizer, eos_token_ids: set[int], stop_strings: tuple[str, ...], max_new_tokens: int,
                 length_reason: str = LENGTH, before: Sequence[int] = ()):
        self._detok = IncrementalDetokenizer(tokenizer)
        for token in before:
            self._detok.push(int(token))
        self.text_start = len(self._detok.text)
        self._eos = eos_token_ids
        self._stops = tuple(s for s in stop_strings if s)
        self._longest_stop = max((len(s) for s in self._stops), default=0)
        self.max_new_tokens = max_new_tokens
        self._length_reason = length_reason  # "context" when the window, not the user's limit, is the bound
        self.token_ids: list[int] = []
        self.origins: list[Origin] = []
        self.spans: list[tuple[int, int]] = []
        self.finish_reason: str | None = None
        self._released = 0  # tokens handed to listeners so far
        self._released_chars = self.text_start

    @property
    def text(self) -> str:
        return self._detok.text

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.token_ids)

    def append(self, tokens: list[int], origins: list[Origin]) -> Emission:
        """Add tokens in order until one ends the reply; returns what may be shown now."""
        for token, origin in zip(tokens, origins):
            if self.finish_reason is not None:
                break
            self._add(token, origin)
        return self._release(final=self.finish_reason is not None)

    def finish(self, reason: str) -> Emission:
        """End the reply for an outside reason (cancelled, context full) and release what was held back."""
        if self.finish_reason is None:
            self._end(reason)
        return self._release(final=True)

    def _add(self, token: int, origin: Origin) -> None:
        before = len(self.text)
        _, span = self._detok.push(token)
        self.token_ids.append(token)
        self.origins.append(origin)
        self.spans.append(span)
        if token in self._eos:
            self._end(EOS)
        elif self._stops and self._cut_at_stop_string(search_from=max(0, before - self._longest_stop + 1)):
            self.finish_reason = STOP
        elif len(self.token_ids) >= self.max_new_tokens:
            self._end(self._length_reason)

    def _end(self, reason: str) -> None:
        """Finish, giving the last token any text the detokenizer held back (e.g. an unfinished UTF-8 sequence)."""
        self.finish_reason = reason
        if self._detok.flush() and self.spans:
            self.spans[-1] = (self.spans[-1][0], len(self.text))

    def _cut_at_stop_string(self, search_from: int) -> bool:
        hits = [i for i in (self.text.find(s, search_from) for s in self._stops) if i >= 0]
        if not hits:
            return False
        cut = min(hits)
        self._detok.truncate_text(cut)
        self.spans = [(min(a, cut), min(b, cut)) for a, b in self.spans]
        return True

    def _held_back_chars(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of a stop string."""
        text = self.text
        for length in range(min(self._longest_stop - 1, len(text)), 0, -1):
            tail = text[-length:]
            if any(s.startswith(tail) for s in self._stops):
                return length
        return 0

    def _release(self, final: bool) -> Emission:
        safe = len(self.text) if final or not self._stops else len(self.text) - self._held_back_chars()
        end = self._released
        while end < len(self.token_ids) and self.spans[end][1] <= safe:
            end += 1
        new_chars = len(self.text) if final else max(self.spans[end - 1][1], self._released_chars) if end else 0
        emission = Emission(
            token_ids=self.token_ids[self._released : end],
            origins=self.origins[self._released : end],
            spans=self.spans[self._released : end],
            text_delta=self.text[self._released_chars : new_chars],
            text_offset=self._released_chars,
        )
        self._released, self._released_chars = end, max(new_chars, self._released_chars)
        return emission
