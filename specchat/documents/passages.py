"""A document's text cut into passages of about `target_chars`: what retrieval ranks and the prompt quotes when the
whole text does not fit.

Each cut falls, in order of preference, at a paragraph break, at a sentence end, at whitespace, or (in a run of
text without any) at the target length; among the cuts of the best kind between half and one and a half times the
target, the one nearest the target wins. The passages cover the text exactly and in order: each is
text[start:end], the next starts where it ends, and the whitespace at a cut stays with the passage before it.
"""

from __future__ import annotations

import bisect
import re
from typing import Sequence

from .document import Passage

_PARAGRAPH_BREAK = re.compile(r"\n[ \t\f]*\n\s*")  # a blank line (and the whitespace after it)
_SENTENCE_END = re.compile(r"[.!?…](?:[\"')\]”’»]*)\s+|[。！？]\s*")
_WHITESPACE = re.compile(r"\s+")
_CUT_KINDS = (_PARAGRAPH_BREAK, _SENTENCE_END, _WHITESPACE)  # in order of preference


def split_passages(text: str, page_starts: Sequence[int] = (), target_chars: int = 1200) -> tuple[Passage, ...]:
    """`text` cut into passages of about `target_chars` characters (see the module), each with its position, its
    [start, end) range in `text` and the 1-based page its first visible character is on (by `page_starts`, the
    offset where each page starts; None without pages). An empty or blank text has no passages."""
    if not text.strip():
        return ()
    target = max(1, target_chars)
    passages: list[Passage] = []
    start = 0
    while start < len(text):
        end = _cut_after(text, start, target)
        if not text[end:].strip():  # only whitespace left: it stays with this passage
            end = len(text)
        passages.append(Passage(position=len(passages), page=_page_of(text, start, end, page_starts),
                                start=start, end=end, text=text[start:end]))
        start = end
    return tuple(passages)


def _cut_after(text: str, start: int, target: int) -> int:
    """Where the passage starting at `start` ends: the end of the text when it is within 1.5 times the target,
    else the best cut (see the module) in the window from half to 1.5 times the target."""
    longest = start + target + target // 2
    if longest >= len(text):
        return len(text)
    shortest = start + max(1, target // 2)
    aim = start + target
    window = text[shortest:longest]
    for cut_kind in _CUT_KINDS:
        cuts = [shortest + match.end() for match in cut_kind.finditer(window)]
        if cuts:
            return min(cuts, key=lambda cut: abs(cut - aim))
    return aim


def _page_of(text: str, start: int, end: int, page_starts: Sequence[int]) -> int | None:
    """The 1-based page holding the first non-whitespace character of text[start:end] (its start when it is all
    whitespace), or None without page starts."""
    if not page_starts:
        return None
    first_visible = start + (len(text[start:end]) - len(text[start:end].lstrip()))
    offset = first_visible if first_visible < end else start
    return max(1, bisect.bisect_right(page_starts, offset))
