"""Which characters of a reply came from accepted drafts, and where they land once the reply is rendered as
Markdown. Qt-free, so that the mapping is tested on its own."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..run_kind import DRAFT_ORIGIN as DRAFT, INFERRED_ORIGIN as INFERRED, ORIGIN_NAMES as NAMES, origin_name

__all__ = ["DRAFT", "INFERRED", "NAMES", "ReplySpans", "align_rendered", "runs"]  # the origin names: run_kind's


@dataclass
class ReplySpans:
    """Token origin spans of one reply, plus the draft proposals the target rejected along the way."""

    spans: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, origin) over the reply text
    rejected: list[tuple[int, str]] = field(default_factory=list)  # (text offset, rejected draft text)

    def add_tokens(self, spans, origins) -> None:
        for (start, end), origin in zip(spans, origins):
            name = origin_name(origin)
            if end <= start:
                continue
            if self.spans and self.spans[-1][2] == name and self.spans[-1][1] == start:
                self.spans[-1] = (self.spans[-1][0], end, name)  # merge runs of one origin
            else:
                self.spans.append((start, end, name))

    def add_rejected(self, offset: int, text: str) -> None:
        if text:
            self.rejected.append((offset, text))

    def to_json(self) -> list:
        """The stored form: [start, end, origin] runs (rejected proposals are shown live, not stored)."""
        return [[a, b, o] for a, b, o in self.spans]

    @classmethod
    def from_json(cls, data, rejected: list[tuple[int, str]] | None = None) -> ReplySpans:
        return cls(spans=[(int(a), int(b), str(o)) for a, b, o in data or []], rejected=list(rejected or []))

    def draft_mask(self, length: int, origin_name: str = DRAFT) -> list[bool]:
        """Which characters came from `origin_name` (accepted drafts; or INFERRED ones)."""
        mask = [False] * length
        for start, end, origin in self.spans:
            if origin == origin_name:
                for i in range(max(start, 0), min(end, length)):
                    mask[i] = True
        return mask


def align_rendered(source: str, rendered: str, lookahead: int = 64) -> list[int | None]:
    """For each character of `rendered` (Markdown output), the index of the source character it shows, or None.

    Rendering drops markup (`**`, `#`, backticks, list markers) and keeps the text in order, so a greedy walk that
    matches each rendered character with the next equal source character within a short lookahead recovers the
    mapping; characters the renderer invents (bullets, numbering) map to nothing.
    """
    mapping: list[int | None] = []
    i = 0
    for char in rendered:
        j = source.find(char, i, i + lookahead) if char.strip() else _find_space(source, i, lookahead)
        if j < 0:
            mapping.append(None)
            continue
        mapping.append(j)
        i = j + 1
    return mapping


def _find_space(source: str, start: int, lookahead: int) -> int:
    """Whitespace may change kind in rendering (a newline becomes a paragraph break)."""
    for j in range(start, min(len(source), start + lookahead)):
        if source[j].isspace():
            return j
    return -1


def runs(flags: list[bool]) -> list[tuple[int, int]]:
    """[start, end) ranges where flags is True."""
    result = []
    start = None
    for i, flag in enumerate(flags + [False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            result.append((start, i))
            start = None
    return result
