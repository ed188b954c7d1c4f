"""What the dashboard computes and shows without Qt: the filters' choices, the accepted-length distribution, the CSV
and JSON rows, the groups' order, colours and chart labels, the timeline's ticks, and the text of tooltips, table
cells and combo items. The drafters' names and order are core/vocabulary.py's; their colours are DRAFTER_COLOURS here.

Nothing here imports Qt, so it can be tested (and reused) without a window.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from datetime import date, datetime, time, timedelta, timezone
from typing import Iterable, Sequence

from ...core.run_kind import RunKind
from ...core.vocabulary import DRAFTER_KEYS, drafter_kind
from ...storage.records import GroupStats, RunRow

# --- what the filters offer ---------------------------------------------------------------------------------------

ALL_TIME, CUSTOM_DATES = "all", "custom"
RANGES = (("All time", ALL_TIME), ("Last 7 days", 7), ("Last 30 days", 30), ("Custom dates", CUSTOM_DATES))
SOURCES = (("All sources", None), ("Chat replies", "chat"), ("Races", "race"), ("Benchmarks", "bench"), ("API requests", "api"))
GROUPINGS = (("Model pair & drafter", "pair"), ("App session", "app_session"), ("Conversation", "conversation"),
             ("Benchmark category", "category"))

OTHER_COLOURS = ("#00897b", "#5d8aa8", "#8d6e63", "#9e9d24", "#ad1457", "#e69500")
# Each drafter kind's colour in the statistics window (core/vocabulary.py names the kinds; the colours are the UI's)
DRAFTER_COLOURS = {"none": "#6b7280", "pld": "#2e8b57", "history": "#00897b", "model": "#3b6ea8",
                   "hybrid": "#c2185b", "eagle": "#7b52ab", "eagle-hybrid": "#d84315", "universal": "#b8860b"}
SPEEDUP_COLOUR = "#3b6ea8"
SPEED_COLOUR = "#e69500"

MAX_CHART_GROUPS = 8  # more bar sets than this are unreadable; the table lists every group
MAX_POSITIONS = 10
LABEL_CHARS = 28

CHART_FILES = ("speedup-over-time.png", "acceptance-by-position.png", "accepted-lengths.png", "groups.png")
GROUP_COLUMNS = ("Group", "Runs", "Tokens", "Tok/s", "Mean speedup", "α", "τ", "First run", "Last run")


# --- computations without Qt --------------------------------------------------------------------------------------

def accepted_length_distribution(proposed_by_position: Sequence[int],
                                 accepted_by_position: Sequence[int]) -> list[float]:
    """P(a draft step accepted exactly j draft tokens) for j = 0..K; [] when there was no draft step.

    Every draft step proposes at position 1, so proposed[0] counts the steps, and accepted[i-1] counts the steps
    that accepted at least i tokens (acceptance stops at the first rejection). Exactly j = at least j - at least j+1.
    """
    steps = proposed_by_position[0] if proposed_by_position else 0
    if not steps:
        return []
    at_least = [steps, *accepted_by_position, 0]
    return [(at_least[j] - at_least[j + 1]) / steps for j in range(len(accepted_by_position) + 1)]


CSV_COLUMNS = tuple(f.name for f in dataclasses.fields(RunRow)) + ("alpha", "tau")


def csv_row(run: RunRow) -> list[str]:
    """One run as CSV cells, in CSV_COLUMNS order: lists ";"-joined, None empty, datetimes ISO 8601 (UTC)."""
    values = {**dataclasses.asdict(run), "alpha": run.alpha, "tau": run.tau}
    return [_csv_cell(values[column]) for column in CSV_COLUMNS]


def _csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ";".join(str(item) for item in value)
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def run_to_json(run: RunRow) -> dict:
    values = {**dataclasses.asdict(run), "pair": run.pair, "alpha": run.alpha, "tau": run.tau}
    values["created_at"] = run.created_at.isoformat()
    for key in ("proposed_by_position", "accepted_by_position"):
        values[key] = list(values[key])
    return values


def group_to_json(group: GroupStats) -> dict:
    return {"key": group.key, "label": group.label, **dataclasses.asdict(group.aggregate),
            "first_at": group.first_at.isoformat() if group.first_at else None,
            "last_at": group.last_at.isoformat() if group.last_at else None,
            "proposed_by_position": list(group.proposed_by_position),
            "accepted_by_position": list(group.accepted_by_position),
            "acceptance_by_position": list(group.acceptance_by_position),
            "accepted_length_distribution": accepted_length_distribution(group.proposed_by_position,
                                                                         group.accepted_by_position)}


def drafter_of_group(key: str) -> str | None:
    """The drafter in a "pair:…|drafter" or "category:…|drafter" group key (run_groups' format), else None."""
    kind, _, rest = key.partition(":")
    return rest.rpartition("|")[2] if kind in ("pair", "category") and "|" in rest else None


def group_name(group: GroupStats) -> str:
    """A group's full name with its drafter as the status bar and the footers name it ("tiny · prompt lookup +
    past replies", not the stored key "tiny · history"); other groups (sessions, chats) by their label."""
    drafter = drafter_of_group(group.key)
    if drafter is None or " · " not in group.label:
        return group.label
    return f"{group.label.rpartition(' · ')[0]} · {drafter_kind(drafter).label}"


def group_colours(groups: Sequence[GroupStats]) -> dict[str, str]:
    """A colour per group: a drafter's own colour for the first group of that drafter, so the charts agree with
    the timeline's colours; the other colours for the rest."""
    colours: dict[str, str] = {}
    spare = list(dict.fromkeys([*OTHER_COLOURS, *DRAFTER_COLOURS.values()]))
    used: set[str] = set()
    for group in groups:
        colour = DRAFTER_COLOURS.get(RunKind.parse(drafter_of_group(group.key) or "").colour_key, "")
        if not colour or colour in used:
            colour = next((c for c in spare if c not in used), spare[len(colours) % len(spare)])
        colours[group.key] = colour
        used.add(colour)
    return colours


def reading_order(groups: Iterable[GroupStats], by: str) -> list[GroupStats]:
    """A stable order for legends and the table: by name and then drafter (plain first) for pairs and categories,
    by time for sessions and conversations."""
    if by in ("pair", "category"):
        return sorted(groups, key=lambda g: (g.label.rpartition(" · ")[0].casefold(),
                                             _drafter_rank(drafter_of_group(g.key) or "")))
    return sorted(groups, key=lambda g: g.first_at or datetime.min.replace(tzinfo=timezone.utc))


def chart_groups(groups: Sequence[GroupStats], by: str) -> list[GroupStats]:
    """The groups the charts show: the MAX_CHART_GROUPS with the most runs, in reading order."""
    return reading_order(sorted(groups, key=lambda g: g.aggregate.runs, reverse=True)[:MAX_CHART_GROUPS], by)


def chart_labels(groups: Sequence[GroupStats], by: str) -> dict[str, str]:
    """Names for legends and axes that say what tells the groups apart. With one target model (the usual case) a
    pair group is named by its drafter alone, and by its draft model too when there are several; drafters are
    named as in the timeline's legend. The table keeps the full names."""
    labels = {g.key: group_name(g) for g in groups}
    if by == "category":
        for group in groups:
            drafter = drafter_of_group(group.key) or ""
            labels[group.key] = f"{group.label.rpartition(' · ')[0]} · {drafter_kind(drafter).chart_label}"
        return labels
    if by != "pair":
        return labels
    parsed = {g.key: g.key.removeprefix("pair:").rpartition("|") for g in groups}
    pairs = {pair for pair, _, _ in parsed.values()}
    if len({pair.partition(" + ")[0] for pair in pairs}) != 1:
        return labels
    several_drafts = len({pair for pair in pairs if " + " in pair}) > 1
    for key, (pair, _, drafter) in parsed.items():
        name = drafter_kind(drafter).chart_label
        draft = pair.partition(" + ")[2]
        labels[key] = f"{name} · {draft}" if several_drafts and draft else name
    return labels


def time_axis_ticks(first: datetime, last: datetime) -> tuple[datetime, datetime, int, str]:
    """The timeline's x range with ticks on whole local days (whole hours when every run is from one day), so
    that no two tick labels read the same: (start, end, tick count, Qt date format)."""
    first, last = first.astimezone(), last.astimezone()
    if last - first < timedelta(hours=2):  # a fresh database: ticks every few minutes, not one point per hour
        span = max(1, math.ceil((last - first).total_seconds() / 60) + 1)
        step = next(m for m in (1, 2, 5, 10, 15, 20, 30) if span / m <= 6)
        start = first.replace(minute=first.minute - first.minute % step, second=0, microsecond=0)
        count = max(1, math.ceil((last - start).total_seconds() / 60 / step))
        if start + timedelta(minutes=step * count) < last:
            count += 1
        return start, start + timedelta(minutes=step * count), count + 1, "HH:mm"
    if first.date() == last.date():
        start = first.replace(minute=0, second=0, microsecond=0)
        hours = max(1, math.ceil((last - start).total_seconds() / 3600))
        step = math.ceil(hours / 6)
        count = math.ceil(hours / step)
        return start, start + timedelta(hours=step * count), count + 1, "HH:mm"
    days = (last.date() - first.date()).days + 1
    step = math.ceil(days / 7)
    count = math.ceil(days / step)
    return (local_day_start(first.date()), local_day_start(first.date() + timedelta(days=step * count)),
            count + 1, "d MMM")


def short_label(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def local_day_start(day: date) -> datetime:
    """Local midnight of `day`, timezone-aware: the dashboard's dates are the user's calendar days."""
    return datetime.combine(day, time()).astimezone()


def _local(moment: datetime | None) -> str:
    return moment.astimezone().strftime("%d %b %Y %H:%M") if moment is not None else "–"


def _ms(moment: datetime) -> float:
    return moment.timestamp() * 1000.0


def _drafter_rank(drafter: str) -> int:
    return DRAFTER_KEYS.index(drafter) if drafter in DRAFTER_KEYS else len(DRAFTER_KEYS)


# --- text for tooltips, table cells and combo items ---------------------------------------------------------------

def run_tooltip(run: RunRow) -> str:
    where = {"chat": f"chat “{run.conversation_title}”" if run.conversation_title else "chat reply",
             "race": "race lane", "bench": f"benchmark ({run.category})" if run.category else "benchmark"}
    parts = [f"{run.new_tokens} tokens", f"{run.tokens_per_s:.1f} tok/s"]
    if run.speedup is not None:
        parts.insert(0, f"{run.speedup:.2f}× ({run.speedup_basis or 'speedup'})")
    if run.alpha is not None:
        parts.append(f"α {run.alpha:.2f}")
    if run.tau is not None:
        parts.append(f"τ {run.tau:.2f}")
    return (f"{_local(run.created_at)} · {drafter_kind(run.drafter).chart_label} · "
            f"{where.get(run.source, run.source)}\n{run.pair}\n" + " · ".join(parts))


def _speedup_text(speedup: float | None) -> str:
    return f"{speedup:.2f}×" if speedup is not None else "–"


def _unique_labels(labels: list[str]) -> list[str]:
    """A bar category axis merges equal categories; two groups whose shortened labels clash get a number."""
    seen: Counter[str] = Counter()
    unique = []
    for label in labels:
        seen[label] += 1
        unique.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return unique


def _sort_key(key) -> tuple:
    if key is None:
        return (0, 0.0, "")
    if isinstance(key, str):
        return (1, 0.0, key.casefold())
    return (1, float(key), "")


def group_cells(group: GroupStats) -> list[tuple[str, object]]:
    """(text, sort key) per GROUP_COLUMNS column."""
    a = group.aggregate
    drafted = a.draft_proposed > 0
    name = group_name(group)
    return [(name, name), (f"{a.runs:,}", a.runs), (f"{a.new_tokens:,}", a.new_tokens),
            (f"{a.tokens_per_s:.1f}", a.tokens_per_s),
            (_speedup_text(a.mean_speedup), a.mean_speedup),
            (f"{a.mean_alpha:.2f}" if drafted else "–", a.mean_alpha if drafted else None),
            (f"{a.tau:.2f}" if a.target_passes else "–", a.tau if a.target_passes else None),
            (_local(group.first_at), group.first_at.timestamp() if group.first_at else None),
            (_local(group.last_at), group.last_at.timestamp() if group.last_at else None)]


def pair_choices(pairs: Sequence[tuple[str, str | None]]) -> list[tuple[str, object]]:
    """Combo items for the model pairs: every (target, draft), and "any draft" for a target that has several
    (plain and prompt-lookup runs record no draft model, so a pair alone would hide them)."""
    items: list[tuple[str, object]] = [("All model pairs", None)]
    by_target: dict[str, list[str | None]] = {}
    for target, draft in pairs:
        by_target.setdefault(target, []).append(draft)
    for target, drafts in by_target.items():
        if len(drafts) > 1:
            items.append((f"{target} · any draft", (target, None)))
        for draft in drafts:
            items.append((f"{target} + {draft}" if draft else f"{target} · no draft model", (target, draft or "")))
    return items


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _padded(values: Sequence[float], length: int) -> list[float]:
    return list(values[:length]) + [0.0] * (length - len(values))


def _round_up(value: float, step: float) -> float:
    return step * -(-value // step)
