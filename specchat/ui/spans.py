"""Where the characters of a reply land once it is rendered as Markdown, so that the accepted drafts' highlighting
(chats/reply_spans.py gathers which characters those are) follows them. Qt-free, so that the mapping is tested on
its own."""

from __future__ import annotations


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
