"""Side-by-side comparisons ("races"): one prompt, plain decoding and one or more drafters, run one after the other.

Each run is measured in isolation: the drafters never run at the same time, so none slows another down, and every
engine is warmed up first so that the first lane does not pay for one-off costs (allocations, kernel selection).
A Track records what a replay needs: each token's character span, origin and the time it was ready. Qt-free.

A lane run once is within a busy machine's noise (a lane that drafted nothing read 1.15× beside plain decoding). So
a short race runs its lanes again, unseen and alternated (plain, drafter, drafter, plain, ...), for up to
MAX_RUNS runs while the whole stays within REPEAT_S seconds, and a lane's speedup is the median of its runs' ratios
to the plain run beside them, shown with their range; plain decoding's own runs show the noise. A long race stays
one run. A lane that drafted too little (core/run_kind.drafted_enough) gets no ratio at all, and is not run again.
"""

from __future__ import annotations

import bisect
import statistics
import threading
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

from ..core.run_kind import RunKind, drafted_enough, plainly, speedup
from ..core.vocabulary import PLAIN, UNKNOWN_TOKEN
from .chat_engine import ChatEngine, reply_to
from .chat_prompt import Message
from .decoding.events import GenerationResult, StepEvent, origin_runs
from .decoding.speculative import GenerationConfig

WARMUP_TOKENS = 2
MAX_RUNS = 5  # a lane's runs at most, the streamed one included
REPEAT_S = 15.0  # a race runs its lanes again only while all its runs fit in this many seconds
RUNS_KEY = "run_tokens_per_s"  # in a Track's stats: the tokens/s of each of its runs, the streamed one first


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
        """Adds one step of the lane's stream: its tokens, at the time they were ready (event.wall_s: the window
        adds the steps on its own thread, after the engine has gone on). The lane's statistics are its result's,
        taken as it finishes; until then wall_s and new_tokens are read from the tokens added."""
        self.token_ids.extend(event.token_ids)
        self.spans.extend(tuple(s) for s in event.spans)
        self.origins.extend(int(o) for o in event.origins)
        self.times.extend([event.wall_s] * len(event.token_ids))
        self.text += event.text_delta
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

    @property
    def run_speeds(self) -> list[float]:
        """The tokens/s of every time the lane ran: the streamed run first, then the runs again (RaceRunner);
        [tokens_per_s] for a lane run once, or saved before races ran lanes again."""
        return list(self.stats.get(RUNS_KEY) or [self.tokens_per_s])

    def add_run(self, tokens_per_s: float) -> None:
        """A run again of the finished lane (a Rerun's tokens/s), kept in its stats so that a saved comparison
        reopens with the same figures."""
        self.stats[RUNS_KEY] = [*self.run_speeds, tokens_per_s]

    def tokens_at(self, t: float) -> int:
        """How many tokens were ready t seconds after the start."""
        return bisect.bisect_right(self.times, t)

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
    # the median, over the lane's runs, of its tokens/s over the plain run's beside it (run_kind.speedup); None for
    # the plain lane, a remote lane, and a lane that drafted too little (`plainly` says so)
    speedup: float | None
    alpha: float | None
    tau: float | None
    acceptance_by_position: tuple[float, ...]
    identical: bool | None  # same tokens as the plain lane (greedy); None when sampled or for the plain lane
    # the lowest and highest of those ratios (for the plain lane: of its runs against their median, the noise);
    # None for one run
    speedup_range: tuple[float, float] | None = None
    runs: int = 1  # how many runs the figures are of (the plain lane's and this lane's, paired)
    plainly: str | None = None  # why a drafting lane shows no ratio: run_kind.plainly's "decoded plainly ..."
    draft_proposed: int = 0
    draft_accepted: int = 0


def lane_results(tracks: Sequence[Track], greedy: bool) -> list[LaneResult]:
    """Figures per lane; tracks[0] is the plain lane. A remote lane (another machine) gets no speedup, nor does a
    lane whose drafts made too little of its reply (run_kind.drafted_enough): it says it decoded plainly."""
    plain = tracks[0]
    results = []
    for i, track in enumerate(tracks):
        stats = track.stats
        kind = RunKind.parse(track.drafter)
        drafted = not kind.is_plain
        ratio, spread, runs = _noise(plain) if not i else _ratio(track, plain, kind)
        proposed, accepted = int(stats.get("draft_proposed") or 0), int(stats.get("draft_accepted") or 0)
        too_little = drafted and not kind.is_remote and not drafted_enough(track.new_tokens, accepted)
        results.append(LaneResult(
            drafter=track.drafter, new_tokens=track.new_tokens, wall_s=track.wall_s,
            tokens_per_s=track.tokens_per_s, speedup=None if too_little else ratio,
            alpha=stats.get("alpha") if drafted else None, tau=stats.get("tau"),
            acceptance_by_position=tuple(stats.get("acceptance_by_position") or ()) if drafted else (),
            identical=track.same_output(plain) if i and greedy else None,
            speedup_range=None if too_little else spread, runs=1 if too_little else runs,
            plainly=plainly(proposed, accepted, awaiting_costs=bool(stats.get("awaiting_costs")))
            if too_little else None,
            draft_proposed=proposed, draft_accepted=accepted))
    return results


def _ratio(track: Track, plain: Track, kind: RunKind) -> tuple[float | None, tuple[float, float] | None, int]:
    """A drafting lane's speedup over its runs: (the median of its runs' ratios to the plain runs beside them, their
    lowest and highest (None for one run), how many runs); (None, None, 1) where there is no ratio (a remote lane,
    no speed)."""
    ratios = [speedup(mine, theirs, kind) for mine, theirs in zip(track.run_speeds, plain.run_speeds)]
    if not ratios or None in ratios:
        return None, None, 1
    return statistics.median(ratios), (min(ratios), max(ratios)) if len(ratios) > 1 else None, len(ratios)


def _noise(plain: Track) -> tuple[None, tuple[float, float] | None, int]:
    """The plain lane's spread: (no speedup, its runs' lowest and highest tokens/s over their median (None for one
    run, or no speed), how many runs). What two runs of the same decoding differ by here."""
    speeds = plain.run_speeds
    middle = statistics.median(speeds)
    if len(speeds) < 2 or middle <= 0:
        return None, None, len(speeds)
    return None, (min(speeds) / middle, max(speeds) / middle), len(speeds)


def all_identical(tracks: Sequence[Track]) -> bool:
    return all(track.same_output(tracks[0]) for track in tracks[1:])


@dataclass(frozen=True)
class Rerun:
    """A lane run again, unseen, to measure the noise (RaceRunner.stream yields it with the lane): its run (2 for
    the first run again) of `runs`, and its tokens/s once it ended (None: it is starting)."""

    run: int
    runs: int
    tokens_per_s: float | None = None


class RaceRunner:
    """Runs the lanes of a race one after the other, every lane's engine warmed up first, then again, alternated,
    while the race is short (module docstring)."""

    def __init__(self, engine_for: Callable[[str], ChatEngine], repeat_s: float = REPEAT_S,
                 max_runs: int = MAX_RUNS):
        """engine_for: a lane's drafter name -> its ChatEngine (an EngineCache's, which keeps it between races, or
        a remote engine); called on the thread the race runs on. repeat_s, max_runs: how long all of a lane's runs
        may take together and how many there may be (max_runs 1: every lane runs once)."""
        self._engine_for = engine_for
        self.repeat_s, self.max_runs = repeat_s, max_runs

    def stream(self, messages: Sequence[Message], system: str | None, drafters: Sequence[str],
               config: GenerationConfig, cancel: threading.Event | None = None
               ) -> Iterator[tuple[int, StepEvent | Rerun]]:
        """Yields (lane, event): all of lane 0 (plain), then lane 1, ... The same conversation, config and seed for
        every lane. Then, while the race is short, (lane, Rerun) pairs: as each run again starts and as it ends
        (reruns). A cancelled race ends after the lane that was running, with no Rerun for a run it cut short."""
        names = lanes_for(drafters)
        engines = [self._engine_for(drafter) for drafter in names]
        warm_up = replace(config, max_new_tokens=WARMUP_TOKENS)
        for engine in engines:
            reply_to(engine, messages, system, warm_up)
        results: list[GenerationResult] = []
        for lane, engine in enumerate(engines):
            for event in engine.stream(messages, system, config, cancel):
                yield lane, event
                if event.result is not None:
                    results.append(event.result)
            if cancel is not None and cancel.is_set():
                return
        yield from self.reruns(names, engines, results,
                               lambda engine: reply_to(engine, messages, system, config, cancel), cancel)

    def reruns(self, names: Sequence[str], engines: Sequence[ChatEngine], results: Sequence[GenerationResult],
               run: Callable[[ChatEngine], GenerationResult],
               cancel: threading.Event | None = None) -> Iterator[tuple[int, Rerun]]:
        """Runs again (run(engine): one whole reply) the plain lane and each lane with a ratio to show (by its name
        in `names`, not remote, and drafted enough in its streamed run, `results`), in alternating order, for as
        many runs as fit in repeat_s at their streamed runs' pace; none when no lane has a ratio. Yields
        (lane, Rerun) as each starts and ends; stops, cancelled, without the run it cut short."""
        lanes = [0] + [lane for lane, result in enumerate(results) if lane and _has_ratio(names[lane], result)]
        pace = sum(results[lane].stats.wall_s for lane in lanes)
        runs = min(self.max_runs, int(self.repeat_s // pace) if pace > 0 else self.max_runs)
        if len(lanes) < 2:
            return
        for number in range(2, runs + 1):
            # plain last in the second run, first in the third, ...: a drift of the machine's speed falls on both
            for lane in (lanes if number % 2 else lanes[::-1]):
                yield lane, Rerun(number, runs)
                result = run(engines[lane])
                if cancel is not None and cancel.is_set():
                    return
                stats = result.stats
                yield lane, Rerun(number, runs, stats.new_tokens / stats.wall_s if stats.wall_s > 0 else 0.0)


def _has_ratio(name: str, result: GenerationResult) -> bool:
    """Whether a lane's streamed run (result) gets a ratio worth running again for: not a remote engine's (its
    speed is another machine's) and drafted enough (run_kind.drafted_enough)."""
    return not RunKind.parse(name).is_remote and drafted_enough(result.stats.new_tokens, result.stats.draft_accepted)


def lanes_for(drafters: Sequence[str]) -> list[str]:
    """The lanes a race runs: plain first, then the drafters in the order given, each once."""
    return list(dict.fromkeys([PLAIN, *drafters]))
