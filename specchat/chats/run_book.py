"""Recording runs: a chat reply's run begun as it starts and completed as it ends, its footer, the status bar's
figures, and the plain-decoding baseline that every chat reply's speedup is measured against. No Qt: ChatSession
(ui/session.py) owns one and tells the windows when the statistics change."""

from __future__ import annotations

from ..core.machine_load import CpuReading, read_cpu, was_busy
from ..core.run_kind import RunKind, drafted_enough, plainly, speedup as speedup_over_plain
from ..core.vocabulary import (BIT_IDENTICAL, CONTEXT, DISTRIBUTION, ERROR, EXACTNESS_LABELS, INTERRUPTED, LENGTH,
                               STREAMING, drafter_kind)
from ..engine.decoding.events import GenerationResult, GenerationStats
from ..storage.records import GroupStats, RunFilter, RunRecord, RunRow
from ..storage.run_values import BUSY, CALIBRATED, OWN_PLAIN_STEPS
from .run_context import RunContext

ENDINGS = {CONTEXT: "reached the model's context window: start a new chat to go on",
           INTERRUPTED: "cut short when specchat was closed or killed: figures up to its last save",
           LENGTH: "reached the reply length limit (Settings)", ERROR: "ended by an error"}
# What a continued reply's later part promises against the reply never cut (chats/continuation.py), by its run's
# exactness; None: nothing, the reply's earlier text was read again (its tokens were not kept, or its prompt changed).
CONTINUED = {BIT_IDENTICAL: "bit-identical to one uninterrupted reply",
             DISTRIBUTION: "same distribution as one uninterrupted reply", None: "same text, re-read"}


KEPT_READINGS = 16  # begun runs whose CPU counters are kept for complete(); one reply streams at a time
REPLY_SOURCES = ("chat", "api")  # the runs the status bar counts as the session's replies (storage's RUN_SOURCES)


# A plain reply refreshes the calibration only from a chat about as short as the calibration's own (ui/session.py's
# CALIBRATION_PROMPT: 96 tokens with the system prompt): deeper, plain decoding is slower (each token attends to
# more: 105-109 tok/s after 38 tokens, 80-86 after 419 on the embedded model, docs/performance.md), and the
# baseline would drift from a short chat's speed towards the depth of the user's last plain reply.
SHALLOW_PROMPT_TOKENS = 128


class RunBook:
    """The chat replies' runs of one app session in the Store (app_session_id), and the plain-decoding baseline
    their speedups are measured against."""

    def __init__(self, store, app_session_id: int):
        self.store, self.app_session_id = store, app_session_id
        self.plain_tokens_per_s: float | None = None  # set by the calibration at load, refreshed by plain replies
        self._cpu_at_begin: dict[int, CpuReading | None] = {}  # each begun run's CPU counters (machine_load)

    def begin(self, conversation_id: int, message_id: int, prompt_tokens: int,
              context: RunContext, sources: list | None = None) -> tuple[int, RunRecord]:
        """The reply's run, recorded as it starts (finish_reason "streaming") so that a kill keeps its statistics
        up to the last partial save (ReplyRecorder.partial saves them with the text); complete() finishes it.

        Takes the reply's conversation and message, its prompt's length and what it runs with (its config's seed
        set) and what it was given of the chat's documents (sources, stored form: Source.stored); returns the run's
        id and the record written, which the reply's footer is read from if it fails."""
        record = self.record(GenerationStats(prompt_tokens=prompt_tokens).to_dict(), context,
                             message_id=message_id, conversation_id=conversation_id, finish_reason=STREAMING,
                             sources=sources)
        run_id = self.store.record_run(record)
        self._cpu_at_begin[run_id] = read_cpu()
        while len(self._cpu_at_begin) > KEPT_READINGS:  # runs that failed, never completed
            self._cpu_at_begin.pop(next(iter(self._cpu_at_begin)))
        return run_id, record

    def complete(self, conversation_id: int, message_id: int, result: GenerationResult, context: RunContext,
                 run_id: int | None = None, sources: list | None = None) -> RunRecord:
        """The finished reply's statistics: completing the run begun with begin() (run_id), or a new one. Returns
        the record written (what the reply's footer says: footer_text), so nobody reads it back.

        Where other programs took a quarter of the cores or more while a begun run ran (core/machine_load.py), a
        ratio against the calibration is not claimed (basis BUSY) and a plain reply does not refresh it: both
        were measured on a quieter machine. A ratio against the reply's own plain steps stands: they ran then."""
        stats = result.stats
        sampled = context.config.sampling.temperature > 0
        busy = was_busy(self._cpu_at_begin.pop(run_id, None), read_cpu())  # False for a run not begun here
        if (RunKind.parse(context.drafter).is_plain and stats.wall_s > 0 and not sampled and not busy
                and stats.prompt_tokens <= SHALLOW_PROMPT_TOKENS):
            # a plain greedy reply of a short chat is itself a fresh measurement of the baseline
            measured = stats.decode_tokens_per_s
            base = self.plain_tokens_per_s
            self.plain_tokens_per_s = measured if base is None else 0.7 * base + 0.3 * measured
        speedup, basis, baseline = self._speedup(stats, context)
        if busy and basis == CALIBRATED and speedup is not None:
            speedup, basis = None, BUSY  # the calibration was taken on a quieter machine: no ratio, and why
        if not drafted_enough(stats.new_tokens, stats.draft_accepted):
            speedup = None  # (almost) nothing drafted: the reply was decoded plainly, and a ratio would be noise
        if sampled:
            speedup = None  # the baseline is greedy plain decoding: sampling's own cost would count as the drafter's
        values = self.record(
            stats.to_dict(), context, result.seed, message_id=message_id, conversation_id=conversation_id,
            speedup=speedup, speedup_basis=basis if speedup or basis == BUSY else None,
            baseline_tokens_per_s=baseline, finish_reason=result.finish_reason, sources=sources)
        if run_id is None:
            self.store.record_run(values)
        else:
            self.store.update_run(run_id, values)
        return values

    def _speedup(self, stats: GenerationStats, context: RunContext) -> tuple[float | None, str, float | None]:
        """A reply's decode speed over plain decoding's, its basis (storage's SPEEDUP_BASES) and the plain tok/s it
        was measured against: against its own
        plain steps ("own plain steps": GenerationStats.plain_decode_tokens_per_s, at the reply's depth and in its
        moment) where it has enough of them, else against the calibration at load ("calibrated"), a short chat's,
        which a reply deep in a chat or after a document decodes slower than (docs/performance.md, "The chat's
        speedup against its own plain steps"). Decode speed against decode
        speed: the prompt's reading is left out of both. None for a remote engine: its speed says nothing against
        this machine's plain decoding."""
        own = None if context.models.device.startswith("cuda") else stats.plain_decode_tokens_per_s
        if own is not None:
            return speedup_over_plain(stats.decode_tokens_per_s, own, context.drafter), OWN_PLAIN_STEPS, own
        base = self.plain_tokens_per_s
        return speedup_over_plain(stats.decode_tokens_per_s, base, context.drafter), CALIBRATED, base

    def record(self, stats: dict, context: RunContext, seed: int | None = None, **extra) -> RunRecord:
        """A chat reply's (or a race lane's) generation run for the Store (RunContext.record): the engine's figures
        (stats: a GenerationStats.to_dict()), what produced them (context; `seed` when the engine picked it) in this
        app session, and `extra` fields of RunRecord. Source "chat" (Store.save_comparison stores a race's runs as
        "race")."""
        return context.record(stats, "chat", seed=seed, app_session_id=self.app_session_id, **extra)

    def footer(self, message_id: int) -> str:
        """The line under the stored reply `message_id` (footer_text of its latest run; "" when it has none)."""
        run = self.store.run_for_message(message_id)
        return "" if run is None else footer_text(run)

    # -- what the dashboard reads, and the benchmark's runs ----------------------------------------------------------

    def find(self, where: RunFilter = RunFilter()) -> list[RunRow]:
        """Every stored run (chats, races, benchmarks, the API) that `where` keeps, oldest first."""
        return self.store.runs(where)

    def grouped(self, by: str, where: RunFilter = RunFilter()) -> list[GroupStats]:
        """Those runs summed per group (by: one of storage.run_queries.GROUPINGS)."""
        return self.store.run_groups(by, where)

    def choices(self) -> dict[str, list]:
        """The targets, pairs and drafters that have runs (the dashboard's filter lists)."""
        return self.store.run_choices()

    def add(self, record: RunRecord) -> int:
        """Stores a run made elsewhere (a benchmark's: bench.report.bench_run_values); returns its id."""
        return self.store.record_run(record)

    def status_text(self, conversation_id: int | None) -> str:
        """The status bar's figures, short enough for a narrow window: this chat's replies and speedup, then the
        app session's replies (REPLY_SOURCES: a race's lanes and a benchmark's prompts are the dashboard's), speed,
        acceptance, τ and speedup."""
        session = self.store.app_session_stats(self.app_session_id, REPLY_SOURCES)
        text = f"Session: {_replies(session.runs)}"
        if session.runs:
            text += f" · {session.tokens_per_s:.1f} tok/s · accepted {session.mean_alpha:.0%} · τ {session.tau:.2f}"
            if session.mean_speedup:
                text += f" · {session.mean_speedup:.2f}× vs plain"
        if conversation_id is not None:
            chat = self.store.conversation_stats(conversation_id)
            if chat.runs:
                text = f"Chat: {_replies(chat.runs)}" + (
                    f" · {chat.mean_speedup:.2f}× vs plain" if chat.mean_speedup else "") + "   |   " + text
        return text


def drafter_words(run) -> str:
    """What drafted a run, as the status bar names it: the drafter's label and its K ("prompt lookup + past
    replies, adaptive K"), "plain decoding" alone (no draft, no K), a remote engine's drafter as its server named
    it. Takes a RunInfo or RunRecord."""
    kind = RunKind.parse(run.drafter)
    if kind.is_remote:
        return run.drafter
    label = drafter_kind(run.drafter).label
    if kind.is_plain:
        return label
    return f"{label}, {'adaptive K' if run.adaptive else f'K={run.k}'}"


def footer_text(run, part: int | None = None) -> str:
    """The line under a reply: tokens, speed, the time to the first token, acceptance, τ, drafter and K, speedup,
    and how it ended. Takes the reply's run as stored (a RunInfo read with its chat) or as just written (the
    RunRecord that RunBook.complete returns): the same fields, so a finished reply's footer needs no read. `part`:
    which part of a continued reply the run wrote (None: a RunInfo's `parts`, else 1); a later part's line says so,
    and what the continuation promises (CONTINUED), before its own figures.

    The time to the first token is the run's prefill_s: the engine's reading of the prompt through the first token
    (a remote engine's: until its first token arrived), the part a long prompt or a document makes slow. It leaves
    out what came before the engine started (fitting the prompt, waiting for the model thread)."""
    parts = [f"{run.new_tokens} tokens", f"{run.tokens_per_s:.1f} tok/s"]
    part = part or getattr(run, "parts", 1)
    if part > 1:
        parts.insert(0, f"continued, part {part} ({CONTINUED.get(run.exactness, CONTINUED[None])})")
    if run.prefill_s > 0:
        parts.append(f"first token {run.prefill_s:.2f} s")
    kind = RunKind.parse(run.drafter)
    drafted = not kind.is_plain and bool(run.draft_proposed)
    if drafted:
        parts += [f"accepted {run.draft_accepted / run.draft_proposed:.0%}",
                  f"τ {run.new_tokens / max(run.target_passes, 1):.2f}"]
    parts.append(drafter_words(run))
    if not kind.is_plain and not kind.is_remote and not drafted_enough(run.new_tokens, run.draft_accepted):
        # no ratio: with (almost) no draft kept, any difference from plain decoding is noise
        parts.append(plainly(run.draft_proposed, run.draft_accepted, awaiting_costs=run.awaiting_costs))
    elif run.speedup:
        parts.append(f"{run.speedup:.2f}× vs plain ({run.speedup_basis})")
    elif run.speedup_basis == BUSY:
        parts.append("no ratio: other programs were busy")
    if run.temperature > 0:  # a sample: the same distribution as plain decoding's at best, never its tokens
        parts.append(f"sampled at T {run.temperature:.2f}" + (" · same distribution as plain" if drafted else ""))
    elif run.exactness in EXACTNESS_LABELS and EXACTNESS_LABELS[run.exactness].footer and drafted \
            and not kind.is_remote:
        parts.append(EXACTNESS_LABELS[run.exactness].footer)
    if run.finish_reason in ENDINGS:
        parts.append(ENDINGS[run.finish_reason])
    return " · ".join(parts)


def _replies(count: int) -> str:
    return f"{count} {'reply' if count == 1 else 'replies'}"
