"""Which characters of a reply came from accepted drafts, and the draft proposals the target rejected along the way:
gathered once, from the reply's step events, by the reply controller (reply_controller.py), which hands them to the
window to draw and to the recorder (recorder.py), which stores them (to_json, as it writes). No Qt."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.vocabulary import DRAFT_ORIGIN, origin_name


@dataclass
class ReplySpans:
    """Token origin spans of one reply, plus the draft proposals the target rejected along the way."""

    spans: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, origin) over the reply text
    rejected: list[tuple[int, str]] = field(default_factory=list)  # (text offset, rejected draft text)

    def add_tokens(self, spans, origins) -> None:
        """Adds tokens' character spans ((start, end) pairs) with their origins (Origin values), merging each run of
        one origin into one span."""
        for (start, end), origin in zip(spans, origins):
            name = origin_name(origin)
            if end <= start:
                continue
            if self.spans and self.spans[-1][2] == name and self.spans[-1][1] == start:
                self.spans[-1] = (self.spans[-1][0], end, name)  # merge runs of one origin
            else:
                self.spans.append((start, end, name))

    def add_rejected(self, offset: int, text: str) -> None:
        """Keeps a rejected proposal `text` that would have continued the reply at character `offset`."""
        if text:
            self.rejected.append((offset, text))

    def to_json(self) -> list:
        """The stored form: [start, end, origin] runs (rejected proposals are shown live, not stored)."""
        return [[a, b, o] for a, b, o in self.spans]

    @classmethod
    def from_json(cls, data, rejected: list[tuple[int, str]] | None = None) -> ReplySpans:
        """The spans of a stored reply (to_json's form, or the store's tuples; None: unknown origins), with the
        rejected proposals kept in memory for it, if any."""
        return cls(spans=[(int(a), int(b), str(o)) for a, b, o in data or []], rejected=list(rejected or []))

    def draft_mask(self, length: int, origin_name: str = DRAFT_ORIGIN) -> list[bool]:
        """Which characters came from `origin_name` (accepted drafts; or INFERRED ones)."""
        mask = [False] * length
        for start, end, origin in self.spans:
            if origin == origin_name:
                for i in range(max(start, 0), min(end, length)):
                    mask[i] = True
        return mask
