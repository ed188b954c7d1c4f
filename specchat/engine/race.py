"""Side-by-side comparisons ("races"): one prompt, plain decoding and one or more drafters, run one after the other.

Each run is measured in isolation: the drafters never run at the same time, so none slows another down, and every
engine is warmed up first so that the first lane does not pay for one-off costs (allocations, kernel selection).
A Track records what a replay needs: each token's character span, origin and the time it was ready. Qt-free.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

from ..core.run_kind import RunKind, speedup
from ..core.vocabulary import PLAIN, UNKNOWN_TOKEN
from .chat_engine import ChatEngine, reply_to
from .chat_prompt import Message
from .decoding.events import GenerationResult, StepEvent, origin_runs
from .decoding.speculative import GenerationConfig

WARMUP_TOKENS = 2


@dataclass
class Track:
    """One lane of a race: the reply and, per token, where its text is, where it came from and when it was ready.

    `times[i]` is seconds from the start of the run (prompt processing included) to the step that produced token i;
    tokens accepted in one verification step share a time, which is what the replay should show.
    """

    drafter: str
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    origins: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    stats: dict = field(default_factory=dict)

    def add(self, event: StepEvent) -> None:
        self.token_ids.extend(event.token_ids)
        self.spans.extend(tuple(s) for s in event.spans)
        self.origins.extend(int(o) for o in event.origins)
        self.times.extend([event.stats.wall_s] * len(event.token_ids))
        self.text += event.text_delta
        self.stats = event.stats.to_dict()
        if event.result is not None:
            self.finish(event.result)

    def same_output(self, other: Track) -> bool:
        """The same tokens, or the same text when either lane's token ids are unknown (a remote lane)."""
        if UNKNOWN_TOKEN in self.token_ids or UNKNOWN_TOKEN in other.token_ids:
            return self.text == other.text
        return self.token_ids == other.token_ids

    def finish(self, result: GenerationResult) -> None:
        """The result is the authority (its text and spans are final, e.g. after a stop string was cut off)."""
        self.text = result.text
        self.token_ids = list(result.token_ids)
        self.spans = [tuple(s) for s in result.spans]
        self.origins = [int(o) for o in result.origins]
        self.times = (self.times + [self.times[-1] if self.times else 0.0] * len(self.token_ids))[:len(self.token_ids)]
        self.finish_reason = result.finish_reason
        self.stats = result.stats.to_dict()

    # -- replay ---------------------------------------------------------------------------------------------------

    @property
    def wall_s(self) -> float:
        return float(self.stats.get("wall_s", self.times[-1] if self.times else 0.0))

    @property
    def new_tokens(self) -> int:
        """The engine's count: a remote lane's token ids are placeholders, one per origin the server reported,
        while its statistics carry the server's own count."""
        return int(self.stats.get("new_tokens") or len(self.token_ids))

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def tokens_at(self, t: float) -> int:
        """How many tokens were ready t seconds after the start."""
        return bisect.bisect_right(self.times, t)

    def chars_at(self, t: float) -> int:
        """How much of the text was on screen at t (a token inside a multi-byte character adds nothing yet)."""
        n = self.tokens_at(t)
        return max((end for _, end in self.spans[:n]), default=0)

    def runs(self, start_token: int = 0, end_token: int | None = None) -> list[tuple[str, int]]:
        """The text of tokens [start_token, end_token) as runs of one origin: [(text, Origin value), ...]."""
        return origin_runs(self.text, self.spans[start_token:end_token], self.origins[start_token:end_token])

    def curve(self) -> list[tuple[float, int]]:
        """(seconds, tokens so far) after each step: the tokens-over-time chart."""
        points: list[tuple[float, int]] = [(0.0, 0)]
        for i, t in enumerate(self.times):
            if i + 1 < len(self.times) and self.times[i + 1] == t:
                continue
            points.append((t, i + 1))
        return points

    # -- storage (its columns: storage.records.track_row) ---------------------------------------------------------

    @classmethod
    def from_row(cls, row) -> Track:
        """From a TrackRecord (storage) or anything with the same attributes."""
        return cls(drafter=row.drafter, text=row.text, token_ids=list(row.token_ids),
                   spans=[tuple(s) for s in row.token_spans], origins=list(row.token_origins),
                   times=list(row.token_times), finish_reason=row.finish_reason, stats=dict(row.stats))


@dataclass(frozen=True)
class LaneResult:
    """A lane's figures, against the plain lane of the same race."""

    drafter: str
    new_tokens: int
    wall_s: float
    tokens_per_s: float
    speedup: float | None  # tokens/s over the plain lane's (run_kind.speedup; None for the plain lane itself)
    alpha: float | None
    tau: float | None
    acceptance_by_position: tuple[float, ...]
    identical: bool | None  # same tokens as the plain lane (greedy); None when sampled or for the plain lane


def lane_results(tracks: Sequence[Track], greedy: bool) -> list[LaneResult]:
    """Figures per lane; tracks[0] is the plain lane. A remote lane (another machine) gets no speedup."""
    plain = tracks[0]
    results = []
    for i, track in enumerate(tracks):
        stats = track.stats
        kind = RunKind.parse(track.drafter)
        drafted = not kind.is_plain
        results.append(LaneResult(
            drafter=track.drafter, new_tokens=track.new_tokens, wall_s=track.wall_s,
            tokens_per_s=track.tokens_per_s,
            speedup=speedup(track.tokens_per_s, plain.tokens_per_s, kind) if i else None,
            alpha=stats.get("alpha") if drafted else None, tau=stats.get("tau"),
            acceptance_by_position=tuple(stats.get("acceptance_by_position") or ()) if drafted else (),
            identical=track.same_output(plain) if i and greedy else None))
    return results


def all_identical(tracks: Sequence[Track]) -> bool:
    return all(track.same_output(tracks[0]) for track in tracks[1:])


class RaceRunner:
    """Runs the lanes of a race one after the other, every lane's engine warmed up first."""

    def __init__(self, engine_for: Callable[[str], ChatEngine]):
        """engine_for: a lane's drafter name -> its ChatEngine (an EngineCache's, which keeps it between races, or
        a remote engine); called on the thread the race runs on."""
        self._engine_for = engine_for

    def stream(self, messages: Sequence[Message], system: str | None, drafters: Sequence[str],
               config: GenerationConfig, cancel: threading.Event | None = None) -> Iterator[tuple[int, StepEvent]]:
        """Yields (lane, event): all of lane 0 (plain), then lane 1, ... The same conversation, config and seed for
        every lane. A cancelled race ends after the lane that was running."""
        engines = [self._engine_for(drafter) for drafter in lanes_for(drafters)]
        warm_up = replace(config, max_new_tokens=WARMUP_TOKENS)
        for engine in engines:
            reply_to(engine, messages, system, warm_up)
        for lane, engine in enumerate(engines):
            for event in engine.stream(messages, system, config, cancel):
                yield lane, event
            if cancel is not None and cancel.is_set():
                return


def lanes_for(drafters: Sequence[str]) -> list[str]:
    """The lanes a race runs: plain first, then the drafters in the order given, each once."""
    return list(dict.fromkeys([PLAIN, *drafters]))
