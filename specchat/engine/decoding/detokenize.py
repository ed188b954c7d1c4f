"""Incremental detokenisation with per-token character spans."""

from __future__ import annotations

REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas, exactly equal to decoding the whole list at the end.

    Decoding token by token is wrong for byte-level vocabularies (a UTF-8 character split over tokens decodes to
    U+FFFD until its last byte arrives) and for tokenizers that merge or strip spaces depending on neighbours. So,
    as in vLLM and TGI, each step decodes a short window that starts a little before the unread tokens, and the
    delta is the part past what the same window decoded before; an unfinished character is held back.
    """

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self.text = ""
        self._prefix_offset = 0  # window start
        self._read_offset = 0  # tokens before this are in self.text

    def push(self, token_id: int) -> tuple[str, tuple[int, int]]:
        """Append one token; returns (text delta, this token's character span in self.text)."""
        self.ids.append(token_id)
        prefix_text = self._decode(self.ids[self._prefix_offset : self._read_offset])
        window_text = self._decode(self.ids[self._prefix_offset :])
        start = len(self.text)
        if len(window_text) > len(prefix_text) and not window_text.endswith(REPLACEMENT_CHAR):
            delta = window_text[len(prefix_text) :]
            self._prefix_offset = self._read_offset
            self._read_offset = len(self.ids)
            self.text += delta
            return delta, (start, len(self.text))
        return "", (start, start)

    def flush(self) -> str:
        """At the end of generation, release held-back text even if it ends in an unfinished character."""
        prefix_text = self._decode(self.ids[self._prefix_offset : self._read_offset])
        window_text = self._decode(self.ids[self._prefix_offset :])
        delta = window_text[len(prefix_text) :] if len(window_text) > len(prefix_text) else ""
        self._read_offset = len(self.ids)
        self.text += delta
        return delta

    def truncate_text(self, length: int) -> None:
        """Cut the visible text (a stop string was found); no more tokens are pushed after this."""
        self.text = self.text[:length]

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens,
                                     clean_up_tokenization_spaces=False)
