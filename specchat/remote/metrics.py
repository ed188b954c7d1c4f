"""Speculative-decoding figures from a remote server's Prometheus /metrics: a small text-format parser, the
counters each engine exposes, and the difference between two reads (alpha and tau around one reply).

The exposition format (https://prometheus.io/docs/instrumenting/exposition_formats/) is one sample a line:
`name{label="value",...} value [timestamp]`, with `# HELP` / `# TYPE` lines and other `#` comments in between.
prometheus_client, which vLLM and SGLang use, writes a counter `x` as `x_total` (the count) and `x_created` (the
Unix time it was made); the `_created` samples are timestamps, never counts, so they are left out here.

What each engine exposes, as read in their sources:
- vLLM (v1 engine, vllm/v1/spec_decode/metrics.py): counters `vllm:spec_decode_num_drafts` (verification steps
  that had a draft), `vllm:spec_decode_num_draft_tokens` (tokens proposed), `vllm:spec_decode_num_accepted_tokens`
  and `vllm:spec_decode_num_accepted_tokens_per_pos` (labelled `position`), each labelled by `model_name` and
  `engine` (one series per data-parallel engine: they are summed).
- vLLM's older v0 engine (vllm/engine/metrics.py): counters `..._num_accepted_tokens`, `..._num_draft_tokens` and
  `..._num_emitted_tokens` (accepted drafts plus the one token of the target's own per step), and the gauges
  `vllm:spec_decode_draft_acceptance_rate` and `vllm:spec_decode_efficiency`.
- SGLang (python/sglang/srt/metrics/collector.py): only gauges, `sglang:spec_accept_length` (tokens per verify
  step, the bonus token included) and `sglang:spec_accept_rate`, set by the scheduler at each logging interval
  from its latest batches. Gauges cannot be differenced: they describe the server's recent work, not a reply.

No dependency: prometheus_client's parser would do, but the app does not otherwise need it.

The text comes from an untrusted server: values that are not finite numbers are left out, a `position` label is
read only as ASCII digits below MAX_POSITIONS (so "²" or "10**9" cannot raise or build a tuple that long), and
figures outside their range (an acceptance rate above 1, a negative count) give no figures rather than wrong ones.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_POSITION = re.compile(r"[0-9]{1,3}")
MAX_POSITIONS = 64  # draft positions read from the per-position series (vLLM drafts at most a few dozen)


@dataclass(frozen=True)
class Sample:
    """One line of exposition text: a metric name, its labels and its value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, name: str, default: str | None = None) -> str | None:
        return dict(self.labels).get(name, default)


def parse_prometheus_text(text: str) -> list[Sample]:
    """Every sample in Prometheus (or OpenMetrics) text. Comments, blank lines and lines that are not samples are
    skipped rather than fatal: a server's extra lines must not hide the counters we read."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        sample = _parse_sample(line)
        if sample is not None:
            samples.append(sample)
    return samples


def _parse_sample(line: str) -> Sample | None:
    match = _NAME.match(line)
    if match is None:
        return None
    name, rest = match.group(), line[match.end():]
    labels: tuple[tuple[str, str], ...] = ()
    if rest.startswith("{"):
        parsed = _parse_labels(rest)
        if parsed is None:
            return None
        labels, rest = parsed
    rest = rest.split(" # ", 1)[0]  # an OpenMetrics exemplar follows " # "
    fields = rest.split()
    if not fields:
        return None
    try:
        value = float(fields[0])  # also "+Inf", "-Inf" and "NaN", as the format writes them
    except ValueError:
        return None
    return Sample(name, labels, value)


def _parse_labels(text: str) -> tuple[tuple[tuple[str, str], ...], str] | None:
    """`{a="x",b="y\\"z"}rest` -> ((("a", "x"), ("b", 'y"z')), "rest"); None if malformed."""
    labels = []
    i = 1
    while True:
        while i < len(text) and text[i] in " ,":
            i += 1
        if i < len(text) and text[i] == "}":
            return tuple(labels), text[i + 1:]
        match = _LABEL_NAME.match(text, i)
        if match is None:
            return None
        i = match.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if text[i:i + 2] != '="':
            return None
        i += 2
        value = []
        while i < len(text) and text[i] != '"':
            if text[i] == "\\" and i + 1 < len(text):
                value.append(_ESCAPES.get(text[i + 1], "\\" + text[i + 1]))
                i += 2
            else:
                value.append(text[i])
                i += 1
        if i >= len(text):
            return None
        labels.append((match.group(), "".join(value)))
        i += 1


def engine_of_metrics(text: str) -> str | None:
    """"vllm" or "sglang" when the text has that engine's metrics (every one of theirs is namespaced)."""
    for sample in parse_prometheus_text(text):
        for engine in ("vllm", "sglang"):
            if sample.name.startswith(engine + ":"):
                return engine
    return None


# The series read, by their names without prometheus_client's `_total` suffix (some exporters leave it out).
VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
VLLM_V0_EMITTED = "vllm:spec_decode_num_emitted_tokens"
VLLM_V0_ACCEPTANCE_RATE = "vllm:spec_decode_draft_acceptance_rate"
VLLM_V0_EFFICIENCY = "vllm:spec_decode_efficiency"
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"
_COUNTERS = (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED, VLLM_V0_EMITTED)
_GAUGES = (VLLM_V0_ACCEPTANCE_RATE, VLLM_V0_EFFICIENCY, SGLANG_ACCEPT_LENGTH, SGLANG_ACCEPT_RATE)


@dataclass(frozen=True)
class SpecDecodeCounters:
    """A server's speculative-decoding metrics at one moment, summed over its engines (data-parallel ranks).

    Counters (None when the server does not expose them) only grow while the server runs, so the difference of
    two reads counts what happened in between. The gauges are the engine's own recent averages."""

    engine: str  # "vllm" (v1), "vllm-v0" or "sglang"
    drafts: float | None = None  # verification steps that checked a draft
    draft_tokens: float | None = None  # draft tokens proposed
    accepted: float | None = None  # draft tokens accepted
    emitted: float | None = None  # v0: accepted drafts + one target token per step
    accepted_per_position: tuple[float, ...] = ()  # accepted at draft position 0, 1, ...
    acceptance_rate_gauge: float | None = None  # vLLM v0 / SGLang: the engine's own recent acceptance rate
    accept_length_gauge: float | None = None  # SGLang: the engine's own recent tokens per verify step

    @classmethod
    def from_text(cls, text: str) -> SpecDecodeCounters | None:
        """The counters in /metrics text; None when it has no speculative-decoding series (speculation off, or an
        engine we do not know)."""
        sums: dict[str, float] = {}
        gauges: dict[str, list[float]] = {}
        positions: dict[int, float] = {}
        for sample in parse_prometheus_text(text):
            if sample.name.endswith("_created") or not math.isfinite(sample.value):
                continue
            name = sample.name.removesuffix("_total")
            if name in _COUNTERS:
                sums[name] = sums.get(name, 0.0) + sample.value
            elif name == VLLM_ACCEPTED_PER_POSITION:
                position = sample.label("position")
                if position is not None and _POSITION.fullmatch(position) and int(position) < MAX_POSITIONS:
                    positions[int(position)] = positions.get(int(position), 0.0) + sample.value
            elif name in _GAUGES:
                gauges.setdefault(name, []).append(sample.value)
        if not sums and not gauges and not positions:
            return None
        mean = {name: sum(values) / len(values) for name, values in gauges.items()}
        if SGLANG_ACCEPT_LENGTH in mean or SGLANG_ACCEPT_RATE in mean:
            return cls(engine="sglang", acceptance_rate_gauge=mean.get(SGLANG_ACCEPT_RATE),
                       accept_length_gauge=mean.get(SGLANG_ACCEPT_LENGTH))
        per_position = tuple(positions.get(i, 0.0) for i in range(max(positions) + 1)) if positions else ()
        v0 = VLLM_DRAFTS not in sums and (VLLM_V0_EMITTED in sums or VLLM_V0_ACCEPTANCE_RATE in mean)
        return cls(engine="vllm-v0" if v0 else "vllm", drafts=sums.get(VLLM_DRAFTS),
                   draft_tokens=sums.get(VLLM_DRAFT_TOKENS), accepted=sums.get(VLLM_ACCEPTED),
                   emitted=sums.get(VLLM_V0_EMITTED), accepted_per_position=per_position,
                   acceptance_rate_gauge=mean.get(VLLM_V0_ACCEPTANCE_RATE))


SERVER_WIDE = ("server-wide: every request the server ran between the two reads of /metrics counts, other "
               "users' included")


@dataclass(frozen=True)
class SpecDecodeDelta:
    """What the server's speculation did between two reads, with the rates it gives.

    alpha = accepted / proposed draft tokens; tau = tokens per verification step, the target's own token included:
    1 + accepted / drafts (vLLM v1), emitted / steps with steps = emitted - accepted (v0: each step emits its
    accepted drafts plus one token of the target's). None where the counts do not give it."""

    engine: str
    alpha: float | None
    tau: float | None
    scope: str  # where the figures come from and what they cover, for the UI's label
    server_wide: bool = True
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None
    accepted_per_position: tuple[float, ...] = ()

    @property
    def acceptance_by_position(self) -> list[float]:
        """P(draft token i accepted), i = 0, 1, ...: accepted at position i / drafts."""
        if not self.drafts:
            return []
        return [a / self.drafts for a in self.accepted_per_position]


def delta(before: SpecDecodeCounters | None, after: SpecDecodeCounters | None) -> SpecDecodeDelta | None:
    """alpha and tau from two reads around a reply; None when either read has no speculative metrics."""
    if after is None:
        return None
    if after.engine == "sglang":  # gauges: the value now, not a difference
        return SpecDecodeDelta(
            engine="sglang", alpha=_rate(after.acceptance_rate_gauge), tau=_length(after.accept_length_gauge),
            scope="server-wide: SGLang's own averages over its latest batches (gauges, not counters), other "
                  "users' requests included")
    if before is None or before.engine != after.engine:
        return None
    drafts, draft_tokens, accepted, emitted = (_difference(getattr(before, name), getattr(after, name))
                                               for name in ("drafts", "draft_tokens", "accepted", "emitted"))
    changes = [d for d in (drafts, draft_tokens, accepted, emitted) if d is not None]
    if any(d < 0 for d in changes):  # counters only grow while the server runs
        return SpecDecodeDelta(engine=after.engine, alpha=None, tau=None,
                               scope="the server restarted between the two reads of /metrics: no figures")
    if not draft_tokens:
        return SpecDecodeDelta(engine=after.engine, alpha=None, tau=None, drafts=drafts, draft_tokens=draft_tokens,
                               accepted=accepted,
                               scope="no draft was checked between the two reads of /metrics (is speculation on?)")
    alpha = accepted / draft_tokens if accepted is not None else None
    if after.engine == "vllm":
        tau = 1 + accepted / drafts if drafts and accepted is not None else None
    else:  # v0
        steps = emitted - accepted if emitted is not None and accepted is not None else None
        tau = emitted / steps if steps else None
    per_position = tuple(a - b for a, b in zip(after.accepted_per_position, before.accepted_per_position))
    return SpecDecodeDelta(engine=after.engine, alpha=_rate(alpha), tau=_length(tau), scope=SERVER_WIDE, drafts=drafts,
                           draft_tokens=draft_tokens, accepted=accepted, accepted_per_position=per_position)


def _rate(value: float | None) -> float | None:
    """An acceptance rate, if it is one (0 to 1); a server's impossible figure is no figure."""
    return value if value is not None and 0 <= value <= 1 else None


def _length(value: float | None) -> float | None:
    """Tokens per verification step, if it can be one (1 to 1 + MAX_POSITIONS)."""
    return value if value is not None and 1 <= value <= 1 + MAX_POSITIONS else None


def _difference(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before
