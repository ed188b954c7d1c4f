"""Plain, frozen results of Store methods.

The GUI thread and the generation thread both call the Store; handing them ORM objects would tie those objects to
a Session that is already closed (lazy loads would fail, or worse, touch SQLite from the wrong thread). These
records hold only ints, floats, strings, datetimes and tuples, so they can be passed around and compared freely.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Mapping

ROLES = ("system", "user", "assistant")

Span = tuple[int, int, str]  # (start, end, origin): text[start:end] came from the drafter or from the target


@dataclass(frozen=True)
class ConversationInfo:
    """A conversation as listed in the sidebar; timestamps are timezone-aware UTC."""

    id: int
    title: str
    system_prompt: str | None
    created_at: datetime
    updated_at: datetime
    message_count: int = 0
    in_history: bool = True  # its replies may feed the history drafter (imported chats: once opened)
    pinned: bool = False  # listed at the top (0007)
    folder_id: int | None = None  # the sidebar folder it is in, None for none (0007)


@dataclass(frozen=True, slots=True)  # slots: one object a message, not two (a large chat holds 150,000)
class MessageInfo:
    """One message; `spans` is None when the origin of the text is unknown (user messages, imports).

    A node of its chat's tree (0007): `parent_id` is the message it follows (None for a chat's first), `position`
    its depth, and `siblings` the ids of the messages that share its parent, itself included, oldest first (an
    edited message's or a regenerated reply's alternatives: the `‹ i/n ›` under it); () where it was not read."""

    id: int
    conversation_id: int
    position: int
    role: str
    text: str
    created_at: datetime
    stopped: bool = False
    spans: tuple[Span, ...] | None = None
    finish_reason: str | None = None
    parent_id: int | None = None
    siblings: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunAggregate:
    """Statistics summed over generation runs (a conversation, an app session, or all of them).

    Ratios are computed from sums, not averaged per run, so a long reply weighs more than a short one:
    mean_alpha = accepted / proposed draft tokens, tau = new tokens / target passes, tokens_per_s = new tokens /
    wall time. mean_speedup is the plain mean of the runs that have a speedup, None when none has one.
    """

    runs: int = 0
    new_tokens: int = 0
    draft_proposed: int = 0
    draft_accepted: int = 0
    target_passes: int = 0
    wall_s: float = 0.0
    mean_alpha: float = 0.0
    tau: float = 0.0
    tokens_per_s: float = 0.0
    mean_speedup: float | None = None

    @classmethod
    def of(cls, runs) -> RunAggregate:
        """The same sums over RunRows already read (the dashboard's filtered runs, a group)."""
        runs = list(runs)
        new_tokens = sum(r.new_tokens for r in runs)
        proposed = sum(r.draft_proposed for r in runs)
        accepted = sum(r.draft_accepted for r in runs)
        passes = sum(r.target_passes for r in runs)
        wall = sum(r.wall_s for r in runs)
        speedups = [r.speedup for r in runs if r.speedup is not None]
        return cls(runs=len(runs), new_tokens=new_tokens, draft_proposed=proposed, draft_accepted=accepted,
                   target_passes=passes, wall_s=wall, mean_alpha=accepted / proposed if proposed else 0.0,
                   tau=new_tokens / passes if passes else 0.0, tokens_per_s=new_tokens / wall if wall > 0 else 0.0,
                   mean_speedup=sum(speedups) / len(speedups) if speedups else None)


@dataclass(frozen=True)
class RunInfo:
    """The settings and headline statistics of one reply's generation, for the line under the reply."""

    id: int
    message_id: int | None
    drafter: str
    k: int
    adaptive: bool
    new_tokens: int
    target_passes: int
    draft_proposed: int
    draft_accepted: int
    tokens_per_s: float
    speedup: float | None
    speedup_basis: str | None
    finish_reason: str | None
    exactness: str | None = None  # what the reply promised against plain decoding (RunRecord.exactness)
    prefill_s: float = 0.0  # reading the prompt up to the first token (RunRecord.prefill_s)
    sources: tuple = ()  # what the reply was given of the chat's documents (RunRecord.sources)
    awaiting_costs: bool = False  # the drafter held back, the costs still being measured (RunRecord.awaiting_costs)
    temperature: float = 0.0  # 0: greedy; above: sampled (a regenerated reply samples: its footer says so)
    target: str = ""  # the model that wrote it
    prompt_tokens: int = 0  # what it read: the prompt, and a continued reply's earlier tokens
    parts: int = 1  # the runs that wrote its message: more than one when the reply was continued (this is the last)


@dataclass(frozen=True)
class StoredReply:
    """A reply as continuing it needs it (Store.stored_reply): the message, its token ids under the model that wrote
    them (None: not stored: a reply from before 0007, an import, a remote engine's) and its runs, oldest first (the
    reply's, then one per continuation)."""

    message: MessageInfo
    token_ids: tuple[int, ...] | None
    runs: tuple[RunInfo, ...] = ()


RUN_SOURCES = ("chat", "race", "bench", "api")  # api: `specchat serve`


@dataclass(frozen=True)
class RunProvenance:
    """What produced a run, as plain values: the models (names), the drafter's name, the decoding settings, the
    device and what the reply promised against plain decoding; a RunRecord is one with the run's figures added. The
    engine's side fills it from its RunContext (chats/run_context.py: a config plus the models), so storage never
    sees an engine object."""

    target: str
    drafter: str
    k: int
    adaptive: bool
    temperature: float
    top_p: float
    top_k: int
    seed: int
    device: str
    draft: str | None = None
    # "bit-identical" (the same tokens as plain decoding) or "distribution" (the same distribution, rounding may
    # differ); None: not known
    exactness: str | None = None
    app_session_id: int | None = None


@dataclass(frozen=True)
class RunRecord(RunProvenance):
    """One generation run to store (a row of generation_runs): the settings that produced it and its figures.

    Typed, so that a misspelt field is an error where the record is made rather than a value silently lost. Build
    one with run_record(stats.to_dict(), RunProvenance(...), source, ...) (below); Store.record_run also takes a plain
    mapping of these fields and refuses any other key. Its provenance's fields come first (RunProvenance)."""

    source: str = "chat"  # one of RUN_SOURCES
    conversation_id: int | None = None
    message_id: int | None = None
    comparison_id: int | None = None
    category: str | None = None  # a benchmark prompt's task
    finish_reason: str | None = None
    created_at: datetime | None = None  # None: now
    # the engine's figures (GenerationStats)
    prompt_tokens: int = 0
    new_tokens: int = 0
    target_passes: int = 0
    draft_proposed: int = 0
    draft_accepted: int = 0
    tokens_per_s: float = 0.0
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    wall_s: float = 0.0
    acceptance_by_position: tuple[float, ...] | list = ()
    proposed_by_position: tuple[int, ...] | list = ()
    accepted_by_position: tuple[int, ...] | list = ()
    # against plain decoding
    speedup: float | None = None
    speedup_basis: str | None = None  # run_values.SPEEDUP_BASES
    baseline_tokens_per_s: float | None = None
    predicted_speedup: float | None = None
    # what the reply was given of the chat's documents: [document id, name, page, passage] each (passage None: the
    # whole document; chats/context_plan.Source), None: nothing
    sources: tuple | list | None = None
    # the drafter was held back for the whole reply: this machine's verification costs were still being measured
    # (GenerationStats.awaiting_costs)
    awaiting_costs: bool = False

    @staticmethod
    def figures(stats: Mapping[str, Any]) -> dict:
        """The engine's figures among a GenerationStats.to_dict(): the keys that are run fields (the others, such
        as alpha or tau, are derived from these)."""
        return {key: stats[key] for key in FIGURE_FIELDS if key in stats}


FIGURE_FIELDS = ("prompt_tokens", "new_tokens", "target_passes", "draft_proposed", "draft_accepted", "tokens_per_s",
                 "prefill_s", "draft_s", "verify_s", "wall_s", "acceptance_by_position", "proposed_by_position",
                 "accepted_by_position", "awaiting_costs")


def run_record(stats: Mapping[str, Any], context: RunProvenance, source: str = "chat", **extra: Any) -> RunRecord:
    """The one way a generation run to store is made: the engine's figures (a GenerationStats.to_dict(), or a
    mapping of some of its keys; RunRecord.figures picks the run fields), the context that produced them, the
    source (one of RUN_SOURCES) and `extra` RunRecord fields (message_id, finish_reason, speedup, category, ...).
    Returns the RunRecord; ValueError for a source not in RUN_SOURCES, TypeError for an extra key that is no
    RunRecord field or repeats one of the context's."""
    if source not in RUN_SOURCES:
        raise ValueError(f"a run's source must be one of {', '.join(RUN_SOURCES)}, not {source!r}")
    return RunRecord(**RunRecord.figures(stats), **asdict(context), source=source, **extra)


@dataclass(frozen=True)
class RunFilter:
    """Which runs the dashboard looks at; None means any. `since`/`until` are aware datetimes (until exclusive)."""

    since: datetime | None = None
    until: datetime | None = None
    target: str | None = None
    draft: str | None = None  # "" = runs without a draft model
    drafter: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class RunRow:
    """One generation run with what the dashboard charts: per reply, over time."""

    id: int
    created_at: datetime
    source: str
    target: str
    draft: str | None
    drafter: str
    k: int
    adaptive: bool
    conversation_id: int | None
    conversation_title: str | None
    app_session_id: int | None
    comparison_id: int | None
    category: str | None
    new_tokens: int
    target_passes: int
    draft_proposed: int
    draft_accepted: int
    wall_s: float
    tokens_per_s: float
    speedup: float | None
    speedup_basis: str | None
    proposed_by_position: tuple[int, ...] = ()
    accepted_by_position: tuple[int, ...] = ()

    @property
    def pair(self) -> str:
        """"target + draft" (or the target alone): the model pair the run used."""
        return f"{self.target} + {self.draft}" if self.draft else self.target

    @property
    def alpha(self) -> float | None:
        return self.draft_accepted / self.draft_proposed if self.draft_proposed else None

    @property
    def tau(self) -> float | None:
        return self.new_tokens / self.target_passes if self.target_passes else None


@dataclass(frozen=True)
class GroupStats:
    """Runs summed per group (an app session, a model pair and drafter, a conversation)."""

    key: str
    label: str
    aggregate: RunAggregate
    first_at: datetime | None
    last_at: datetime | None
    proposed_by_position: tuple[int, ...] = ()
    accepted_by_position: tuple[int, ...] = ()

    @property
    def acceptance_by_position(self) -> tuple[float, ...]:
        return tuple(a / p if p else 0.0 for a, p in zip(self.accepted_by_position, self.proposed_by_position))


@dataclass(frozen=True)
class TrackRecord:
    """One pane of a saved comparison, with everything a replay needs."""

    position: int
    drafter: str
    text: str
    finish_reason: str | None
    token_ids: tuple[int, ...]
    token_spans: tuple[tuple[int, int], ...]
    token_origins: tuple[int, ...]
    token_times: tuple[float, ...]
    stats: dict


def track_row(track: Any) -> dict[str, Any]:
    """The comparison_tracks columns of one race lane, for Store.save_comparison. Takes an engine.race.Track, or
    anything with its attributes (drafter, text, finish_reason, token_ids, spans, origins, times, stats: storage
    reads them, never imports the engine); returns plain lists and dicts, copied, that Track.from_row reads back
    from the stored TrackRecord."""
    return {"drafter": track.drafter, "text": track.text, "finish_reason": track.finish_reason,
            "token_ids": list(track.token_ids), "token_spans": [list(s) for s in track.spans],
            "token_origins": list(track.origins), "token_times": list(track.times), "stats": dict(track.stats)}


@dataclass(frozen=True)
class ComparisonInfo:
    """A saved comparison as listed in the race window's history."""

    id: int
    created_at: datetime
    prompt: str
    target: str
    draft: str | None
    drafters: tuple[str, ...]
    greedy: bool
    identical: bool | None
    settings: dict
    tracks: tuple[TrackRecord, ...] = ()


@dataclass(frozen=True)
class FolderInfo:
    """A folder of chats in the sidebar (0007), with how many chats it holds."""

    id: int
    name: str
    created_at: datetime
    chat_count: int = 0


@dataclass(frozen=True)
class MessageHit:
    """One result of searching the history (ChatList.search): a message whose text matches, or (`message_id` None)
    a chat whose title matches. `snippet` is plain text: the words around the match in the message ("…" where cut),
    or the title; `marks` are the [start, end) ranges of the matched words in it."""

    conversation_id: int
    title: str
    message_id: int | None
    role: str | None
    snippet: str
    marks: tuple[tuple[int, int], ...] = ()

    def snippet_html(self, before: str = "<b>", after: str = "</b>") -> str:
        """The snippet as HTML for a rich-text view: every character of it escaped (a message may hold `<script>`
        or `&`), the matched words between `before` and `after` (the caller's own markup, not escaped)."""
        parts, at = [], 0
        for start, end in self.marks:
            parts += [html.escape(self.snippet[at:start]), before, html.escape(self.snippet[start:end]), after]
            at = end
        parts.append(html.escape(self.snippet[at:]))
        return "".join(parts)
