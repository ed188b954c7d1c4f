"""Text as the common ground of two tokenizers, for the universal drafter (universal.py).

`TextCodec` decodes and encodes one tokenizer's ids exactly (special tokens kept as their text, nothing added, no
clean-up of spaces) and handles a stretch in the middle of a sequence: a SentencePiece decoder drops the space of
the first token of a string and its encoder adds one, and a byte-level token may hold part of a character, so a
stretch is always decoded and encoded with a little of what precedes it. `DraftView` keeps the draft's tokens for
the text of the target's context as the context grows, re-tokenizing only a window at the end (transformers'
universal assisted generation re-tokenizes a "lookbehind" window for the same reason).
"""

from __future__ import annotations

import bisect
from typing import Sequence

import torch

REPLACEMENT = "\ufffd"  # what a decoder writes for the bytes of a character cut between tokens
UTF8_MAX_BYTES = 4  # a character cut between byte tokens is complete after at most this many of them
CONTEXT_TOKENS = 4  # tokens of left context when decoding a stretch
CONTEXT_CHARS = 32  # characters of left context when encoding a stretch
LAST_CODE_POINT = "\U0010ffff"


class TextCodec:
    """One tokenizer's ids to text and back, exactly: no BOS/EOS added, special tokens kept as their text and
    read back as themselves, spaces left as they are."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        # The Rust tokenizer behind a fast tokenizer: the same ids, without the wrapper's per-call overhead.
        self._backend = getattr(tokenizer, "backend_tokenizer", None)

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=False).ids
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        if len(ids) == 0:
            return ""
        if self._backend is not None:
            return self._backend.decode(list(ids), skip_special_tokens=False)
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def continuation_text(self, before: Sequence[int], ids: Sequence[int]) -> str:
        """The text `ids` add after the tokens `before` (a few tokens of left context, ending on a whole character):
        decode(before + ids) minus decode(before), so that a leading space or a character split between `before`
        and `ids` comes out as it does in the whole sequence."""
        if len(before) == 0:
            return self.decode(ids)
        head, whole = self.decode(before), self.decode([*before, *ids])
        return whole[len(head):] if whole.startswith(head) else self.decode(ids)

    def continuation_ids(self, before_text: str, text: str) -> list[int] | None:
        """The ids of `text` as it is tokenized after `before_text` (a little of the text that precedes it), or
        None when the tokenizer has no token boundary where `text` starts (a token would span both).

        Encodes before_text + text and finds the prefix of its ids that decodes to the part before `text`;
        comparing decoded text, not ids, is what makes a SentencePiece tokenizer's added leading space harmless."""
        if not before_text:
            return self.encode(text)
        ids = self.encode(before_text + text)
        whole = self.decode(ids)
        if not whole.endswith(text):
            return None  # the tokenizer cannot write this text back exactly (unknown characters)
        head = whole[: len(whole) - len(text)]
        for j in range(len(ids) + 1):
            part = self.decode(ids[:j])
            if part == head:
                return ids[j:]
            if len(part) > len(head) and not part.endswith(REPLACEMENT):
                return None
        return None


class DraftView:
    """The draft's token ids for the text of the target's context, kept up to date as the context grows.

    `text` is the decoded context up to its last whole character (`text_end` target tokens; the tokens after it,
    `pending`, hold part of a character). `draft_ids` are the draft tokenizer's ids for `text`. Both sides remember
    where their token boundaries fall in `text`; a position where both have one is an anchor. When the context
    grows, the draft's ids are cut back to an anchor at least `lookbehind` target tokens (and LOOKBEHIND_CHARS
    characters) before the old end and the text from there is encoded again, so that a word split at the old end
    (" hel" + "lo") is tokenized as a whole once its rest arrives. The cost per step is that window, not the
    context.
    """

    ANCHOR_TAIL = 48  # boundaries are recorded for the last tokens of a long addition only (a prompt)
    ANCHOR_SEARCH = 64  # target positions searched back for an anchor before continuing from the draft's end
    LOOKBEHIND_CHARS = 24  # and characters: an anchor is at least this far before the old end of the text

    def __init__(self, target: TextCodec, draft: TextCodec, lookbehind: int = 6):
        self.target = target
        self.draft = draft
        self.lookbehind = lookbehind
        self.reset()

    def reset(self) -> None:
        self.target_ids: list[int] = []
        self.text = ""
        self.text_end = 0  # target tokens that `text` covers
        self._target_offsets: dict[int, int] = {0: 0}  # target position -> character offset in `text`
        self.draft_ids: list[int] = []
        self._draft_at: dict[int, int] = {0: 0}  # character offset -> draft position, where a draft token ends
        self._draft_offsets: list[int] = [0]  # the same offsets in order, to cut back

    @property
    def pending(self) -> list[int]:
        """Target tokens after `text`: the first bytes of a character whose rest has not been generated yet."""
        return self.target_ids[self.text_end:]

    def sync(self, context: Sequence[int]) -> int:
        """Brings `draft_ids` up to date with `context` (the old context plus new tokens); returns the first draft
        position that may have changed."""
        known = len(self.target_ids)
        if len(context) < known or (known and context[known - 1] != self.target_ids[-1]):
            self.reset()  # not a continuation: start again
            known = 0
        old_end, old_length = self.text_end, len(self.text)
        self.target_ids.extend(int(t) for t in context[known:])
        self._extend_text()
        if len(self.text) == old_length and self.draft_ids:
            return len(self.draft_ids)  # only part of a character came: nothing to re-tokenize yet
        offset, position = self._anchor(old_end, old_length)
        self._cut_draft(position, offset)
        window = self.text[offset:]
        ids = self.draft.continuation_ids(self.text[max(0, offset - CONTEXT_CHARS) : offset], window)
        self._append_draft(self.draft.encode(window) if ids is None else ids, offset)
        return position

    # --- the target's side: text and boundaries ------------------------------------------------------------------

    def _extend_text(self) -> None:
        """Decodes the new target tokens onto `text`, recording each one's end as a boundary where it ends on a
        whole character. A long addition (the prompt) is decoded in one piece up to its last ANCHOR_TAIL tokens:
        only boundaries near the end are ever used as anchors."""
        ids = self.target_ids
        bulk_end = len(ids) - self.ANCHOR_TAIL
        if bulk_end - self.text_end > self.ANCHOR_TAIL:
            for end in range(bulk_end, max(self.text_end, bulk_end - UTF8_MAX_BYTES), -1):
                piece = self._target_piece(self.text_end, end)
                if not piece.endswith(REPLACEMENT):
                    self._commit_text(end, piece)
                    break
        for i in range(self.text_end + 1, len(ids) + 1):
            piece = self._target_piece(self.text_end, i)
            if piece.endswith(REPLACEMENT) and i - self.text_end < UTF8_MAX_BYTES:
                continue  # a character cut between tokens: wait for its other bytes
            self._commit_text(i, piece)  # (after UTF8_MAX_BYTES tokens the bytes are simply not UTF-8)

    def _target_piece(self, start: int, end: int) -> str:
        ids = self.target_ids
        return self.target.continuation_text(ids[max(0, start - CONTEXT_TOKENS) : start], ids[start:end])

    def _commit_text(self, end: int, piece: str) -> None:
        self.text += piece
        self.text_end = end
        self._target_offsets[end] = len(self.text)

    # --- the draft's side --------------------------------------------------------------------------------------

    def _anchor(self, old_end: int, old_length: int) -> tuple[int, int]:
        """(character offset, draft position) to re-tokenize from: the latest boundary of both tokenizers at least
        `lookbehind` target tokens before the old end of the text; the draft's end when there is none near (two
        tokenizers that rarely share a boundary, or a draft tokenizer that cannot write the text back)."""
        top = max(0, old_end - self.lookbehind)
        deepest = old_length - self.LOOKBEHIND_CHARS  # a long draft token (a special token's text) is mended too
        for position in range(top, max(-1, top - self.ANCHOR_SEARCH), -1):
            offset = self._target_offsets.get(position)
            if offset is not None and (offset <= deepest or offset == 0) and offset in self._draft_at:
                return offset, self._draft_at[offset]
        return old_length, len(self.draft_ids)

    def _cut_draft(self, position: int, offset: int) -> None:
        del self.draft_ids[position:]
        while self._draft_offsets[-1] > offset:
            del self._draft_at[self._draft_offsets.pop()]

    def _append_draft(self, ids: list[int], offset: int) -> None:
        """Appends the draft's ids for text[offset:], recording the boundaries of its last ANCHOR_TAIL tokens (those
        whose decoded text matches `text`) and the end."""
        start = len(self.draft_ids)
        self.draft_ids.extend(ids)
        first = max(0, len(ids) - self.ANCHOR_TAIL)
        base = offset
        if first > 0:  # the text of the bulk before the tail, in one decode
            bulk = self.draft.continuation_text(self.draft_ids[max(0, start - CONTEXT_TOKENS) : start], ids[:first])
            if self.text.startswith(bulk, offset):
                base = offset + len(bulk)
                self._add_draft_boundary(base, start + first)
            else:
                first = len(ids)  # the draft cannot write this text back: no inner boundaries
        before = self.draft_ids[max(0, start + first - CONTEXT_TOKENS) : start + first]
        for j in range(first + 1, len(ids)):
            piece = self.draft.continuation_text(before, ids[first:j])
            if piece and not piece.endswith(REPLACEMENT) and self.text.startswith(piece, base):
                self._add_draft_boundary(base + len(piece), start + j)
        self._add_draft_boundary(len(self.text), len(self.draft_ids))

    def _add_draft_boundary(self, offset: int, position: int) -> None:
        if offset > self._draft_offsets[-1]:
            self._draft_offsets.append(offset)
            self._draft_at[offset] = position


class PrefixIndex:
    """A tokenizer's tokens by their spelling ("Ġhel", "▁hel": the vocabulary's own strings, in which a sequence of
    tokens is spelled by concatenation), sorted, so that the tokens whose spelling starts with a given string are
    one contiguous run (in sorted order a string's extensions follow it directly), found by bisection. Added and
    special tokens are left out."""

    def __init__(self, tokenizer):
        vocab = tokenizer.get_vocab()
        added = set(tokenizer.get_added_vocab()) if hasattr(tokenizer, "get_added_vocab") else set()
        pairs = sorted((word, i) for word, i in vocab.items() if word not in added)
        self._words = [word for word, _ in pairs]
        self._ids = torch.tensor([i for _, i in pairs], dtype=torch.long)
        self._id_of = dict(pairs)
        self._word_of = {i: word for word, i in pairs}

    def spelling(self, token: int) -> str | None:
        """The token's string in the vocabulary; None for an added or special token."""
        return self._word_of.get(token)

    def _run(self, word: str) -> tuple[int, int]:
        start = bisect.bisect_left(self._words, word)
        # Every string that starts with `word` sorts below word + the last code point (which no token contains).
        return start, bisect.bisect_right(self._words, word + LAST_CODE_POINT, lo=start)

    def extended(self, word: str) -> bool:
        """Whether some token's spelling is `word` and more."""
        start, end = self._run(word)
        return end - start > (1 if word in self._id_of else 0)

    def extendable(self, token: int) -> bool:
        """Whether another token's spelling starts with this one's ("Ġhel" of "Ġhello"): at the end of a text the
        token may only be the start of a longer one, once the text goes on."""
        word = self._word_of.get(token)
        return word is not None and self.extended(word)

    def compatible(self, word: str) -> torch.Tensor:
        """The ids of the tokens a text spelled `word` so far can go on with: those spelled `word` and more, and
        those spelled by a proper prefix of it (the text then goes on past them with the rest of `word`)."""
        start, end = self._run(word)
        prefixes = [self._id_of[word[:i]] for i in range(1, len(word)) if word[:i] in self._id_of]
        return torch.cat([self._ids[start:end], torch.tensor(prefixes, dtype=torch.long)])
