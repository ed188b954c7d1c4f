"""`specchat bench`'s hindsight oracle: the ceiling beside every figure of the report.

Measured on plain decoding's replies (mode "none"): at each step the oracle looks up the conversation so far (the
prompt and the reply up to that step) for the longest continuation of a 2- to 4-gram match that the reply really
goes on with, drafts as much of it as pays on the measured verification cost curve (engine/decoding/cost_curve.py), and
has every draft accepted, since it knows the reply. Its time is the plain run's own prompt processing plus one plain
decoding step's seconds per pass over one token, times the cost of its passes on the curve. Plain decoding's time
over its oracle time is the most a drafter that copies from the conversation could gain on this machine, so the
report can say how much of it each drafter takes (report.py's "captured").

Pure functions on token ids and seconds; nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from ..engine.decoding.cost_curve import CostCurve, monotone

NGRAM_SIZES = (2, 3, 4)  # the matches looked up: the n-grams that end the text so far
MEASURED_STEPS = 3  # measured_curve(): the fewest steps of a size for its mean to count


@dataclass(frozen=True)
class PlainTurn:
    """What the oracle needs of one turn of plain decoding: the prompt's token ids, the reply's, and the run's
    seconds of prompt processing (prefill_s, the reply's first token included) and of decoding after it
    (decode_s: the rest of the turn's wall time, for the reply's tokens after the first)."""

    prompt_ids: tuple[int, ...]
    reply_ids: tuple[int, ...]
    prefill_s: float
    decode_s: float

    @property
    def decode_s_per_token(self) -> float:
        """Seconds of one plain decoding step: decode_s over the tokens after the first (0.0 for a reply of one
        token, which has no decoding to speed up)."""
        steps = len(self.reply_ids) - 1
        return self.decode_s / steps if steps > 0 else 0.0


@dataclass(frozen=True)
class OracleTurn:
    """The oracle's run over one plain reply.

    tokens: the reply's length N. drafted: the draft length K of each of its steps (0 for a plain step), in order;
    each step verifies K + 1 tokens and all are accepted. passes: their cost in one-token passes, the sum of
    ratio(K + 1) (plain decoding's is N - 1: the first token comes from the prefill). copied: the tokens drafted
    (sum of K). prefill_s, plain_s, oracle_s: the plain run's prompt processing, and plain decoding's and the
    oracle's seconds for the turn, prefill included (prefill_s + decode seconds per token * passes)."""

    tokens: int
    drafted: tuple[int, ...]
    passes: float
    copied: int
    prefill_s: float
    plain_s: float
    oracle_s: float

    @property
    def steps(self) -> int:
        """The oracle's verification steps (target passes after the prefill)."""
        return len(self.drafted)

    @property
    def speedup(self) -> float:
        """Plain seconds over the oracle's, prompt processing included on both sides (1.0 for an empty turn)."""
        return self.plain_s / self.oracle_s if self.oracle_s > 0 else 1.0

    @property
    def decode_speedup(self) -> float:
        """Plain decoding's passes over the oracle's: the speedup after the prompt is processed."""
        return (self.tokens - 1) / self.passes if self.passes > 0 else 1.0


def oracle_turn(prompt_ids: Sequence[int], reply_ids: Sequence[int], curve: CostCurve, prefill_s: float,
                decode_s_per_token: float) -> OracleTurn:
    """The oracle over one plain reply.

    Takes the prompt's token ids, the plain reply's (reply_ids[0] came from the prefill), the verification cost
    curve (only its measured sizes are drafted: a size it has no figure for has no price), and the plain run's
    prompt-processing seconds and seconds per decoding step. Walks the reply from its second token: at position
    i, L is the most tokens after an earlier match of the text's last n-gram that agree with the rest of the reply
    (copy_length()'s figure, found through an index of the text's bigrams); best_draft() picks K <= L (and no
    further than the reply's end) with the best tokens per cost; the step costs ratio(K + 1) one-token passes and
    moves on K + 1 tokens. Greedy, step by step, as the issue defines it (not the cheapest path over the whole
    reply). Returns the OracleTurn: its steps, passes, copied tokens and seconds against plain decoding's."""
    reply = list(reply_ids)
    n = len(reply)
    copies = _CopyFinder(prompt_ids, reply)
    drafted: list[int] = []
    passes = 0.0
    i = 1
    while i < n:
        room = n - i - 1  # K drafts and the target's own token must stay inside the reply
        k = best_draft(copies.longest(i, min(room, max(curve.sizes) - 1)), curve, room)
        drafted.append(k)
        passes += curve.ratio(k + 1)
        i += k + 1
    plain_steps = max(n - 1, 0)
    return OracleTurn(tokens=n, drafted=tuple(drafted), passes=passes, copied=sum(drafted), prefill_s=prefill_s,
                      plain_s=prefill_s + decode_s_per_token * plain_steps,
                      oracle_s=prefill_s + decode_s_per_token * passes)


def oracle_of(turn: PlainTurn, curve: CostCurve) -> OracleTurn:
    """oracle_turn() over a PlainTurn (its ids and seconds)."""
    return oracle_turn(turn.prompt_ids, turn.reply_ids, curve, turn.prefill_s, turn.decode_s_per_token)


def best_draft(copyable: int, curve: CostCurve, room: int | None = None) -> int:
    """The draft length K the oracle verifies when `copyable` tokens are known to be right (and at most `room`
    fit before the reply's end): of the measured sizes n = K + 1 with K <= both, the one with the most tokens per
    cost, (K + 1) / ratio(K + 1); the longer on a tie (the same rate, further on). K = 0, a plain step, is always
    allowed (ratio(1) = 1)."""
    limit = copyable if room is None else min(copyable, room)
    best, best_rate = 0, 1.0
    for size in curve.sizes:
        k = size - 1
        if k > limit:
            break
        rate = size / curve.ratio(size)
        if rate >= best_rate:
            best, best_rate = k, rate
    return best


def copy_length(prompt_ids: Sequence[int], reply_ids: Sequence[int], position: int,
                 ngram_sizes: Iterable[int] = NGRAM_SIZES) -> int:
    """L at one position of the reply, on its own (oracle_turn() keeps an index instead): over n in ngram_sizes
    and every earlier occurrence of the last n tokens of text = prompt + reply[:position] (one that ends before
    the text does), the most tokens after it that agree with reply[position:], reading the source only inside the
    text. 0 where nothing matches. For tests and spot checks: quadratic in the text's length."""
    text = list(prompt_ids) + list(reply_ids[:position])
    rest = list(reply_ids[position:])
    end = len(text)
    longest = 0
    for n in ngram_sizes:
        if n > end:
            continue
        tail = text[end - n:]
        for stop in range(n, end):  # the occurrence text[stop - n:stop], ending before the text's end
            if text[stop - n:stop] == tail:
                longest = max(longest, _agreeing(text, stop, rest, len(rest)))
    return longest


class _CopyFinder:
    """The continuations of the text's last bigram as the oracle walks the reply: an index of bigram -> the
    positions just after each of its occurrences, extended as the text grows. A longer n-gram's occurrences end
    where some of its last bigram's do, and a continuation depends only on where its occurrence ends, so the
    longest continuation over 2- to 4-gram matches is the longest over the bigram's (NGRAM_SIZES starts at 2)."""

    def __init__(self, prompt_ids: Sequence[int], reply: list[int]):
        self.prompt = list(prompt_ids)
        self.reply = reply
        self.text = list(self.prompt)
        self.ends: dict[tuple[int, int], list[int]] = {}
        self.indexed = 2  # bigrams ending before this position are in `ends`

    def longest(self, position: int, cap: int) -> int:
        """L at reply position `position` (the text is the prompt and reply[:position]), looked for up to `cap`
        tokens: the oracle never drafts more than that, so a continuation that reaches it ends the search."""
        self.text.extend(self.reply[len(self.text) - len(self.prompt):position])
        text, end = self.text, len(self.text)
        while self.indexed < end:  # occurrences that end before the text's end, never at it
            self.ends.setdefault((text[self.indexed - 2], text[self.indexed - 1]), []).append(self.indexed)
            self.indexed += 1
        if cap <= 0 or end < 2:
            return 0
        rest = self.reply[position:position + cap]
        longest = 0
        for stop in self.ends.get((text[end - 2], text[end - 1]), ()):
            longest = max(longest, _agreeing(text, stop, rest, cap))
            if longest >= cap:
                break
        return longest


def _agreeing(text: list[int], stop: int, rest: Sequence[int], cap: int) -> int:
    """How many of text[stop:] (inside the text) agree with rest, up to cap."""
    limit = min(len(text) - stop, len(rest), cap)
    j = 0
    while j < limit and text[stop + j] == rest[j]:
        j += 1
    return j


def measured_curve(steps_and_seconds: Iterable[tuple[Sequence[int], Sequence[float]]],
                   min_steps: int = MEASURED_STEPS) -> CostCurve | None:
    """A cost curve from the bench's own steps, for a target whose engine has none (a torch target): pairs of
    (steps_by_k, verify_s_by_k), the records' steps that verified k drafts and their target seconds. Each size
    n = k + 1 seen in at least `min_steps` steps costs its mean seconds over the mean of a plain step's, made never
    decreasing (cost_curve.monotone). None without plain steps or without any longer size: no price for a draft."""
    steps: list[int] = []
    seconds: list[float] = []
    for by_k, s_by_k in steps_and_seconds:
        for k, (count, s) in enumerate(zip(by_k, s_by_k)):
            if k >= len(steps):
                steps += [0] * (k + 1 - len(steps))
                seconds += [0.0] * (k + 1 - len(seconds))
            steps[k] += count
            seconds[k] += s
    if not steps or steps[0] < min_steps or seconds[0] <= 0:
        return None
    one = seconds[0] / steps[0]
    ratios = {k + 1: (s / count) / one for k, (count, s) in enumerate(zip(steps, seconds))
              if count >= min_steps and s > 0}
    if len(ratios) < 2:
        return None
    return CostCurve(monotone(ratios))
