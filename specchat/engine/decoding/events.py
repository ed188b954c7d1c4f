"""Plain data emitted by the engine: per-step events, statistics and the final result.

GenerationStats is where a generation's figures end up: the loop adds each verification step with `record_step`
(its counts, and its seconds per phase from engine/decoding/timing.py's Profile). One GenerationStats runs through a
generation: every StepEvent of it holds that same object (no copy per step), and the GenerationResult a copy of its
final figures. Everything here is Qt-free and holds only ints, floats, strings and tuples, so that it can cross
thread boundaries (the GUI worker) and be stored (SQLite) or serialised (CLI --json) without touching torch objects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

from ...core.acceptance import expected_tokens
from ...core.vocabulary import Origin, origin_name


@dataclass
class GenerationStats:
    """Running statistics of one generation: the one object that its step events share, updated in place as it runs
    (copy() takes its figures of one moment; the result holds such a copy)."""

    prompt_tokens: int = 0
    new_tokens: int = 0
    target_passes: int = 0  # target forward passes, the prefill included
    draft_steps: int = 0  # verification steps that had a draft to check
    draft_proposed: int = 0
    draft_accepted: int = 0
    proposed_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    draft_forwards: int = 0  # forward passes of a draft model (0 for model-free drafters)
    rejected_steps: int = 0  # draft steps that stopped at a rejection (n < k): the i.i.d. model's failures
    steps_by_k: list[int] = field(default_factory=list)  # verification steps per draft length k = 0, 1, ...
    verify_s_by_k: list[float] = field(default_factory=list)  # their target forward time: the cost curve
    prefill_s: float = 0.0
    # Prompt positions not read again (a llama.cpp target: kept from the chat's previous turn, or restored from a
    # kept per-chat state), and of those the restored ones; prompt_tokens - prompt_reused were read.
    prompt_reused: int = 0
    prompt_restored: int = 0
    # The drafter was held back for the whole reply: this machine's verification costs were still being measured
    # (a model's first reply here: core/one_time.py), so nothing could be known to pay. Said in the footer.
    awaiting_costs: bool = False
    draft_s: float = 0.0  # drafting (a draft model's forwards, lookups), proposals included
    verify_s: float = 0.0  # the target's forward passes after the prefill, and nothing else
    wall_s: float = 0.0
    # The rest of the wall time, by where it goes (engine overhead; `other_s` is their sum plus the unattributed):
    accept_s: float = 0.0  # the verification rule: argmax or the rejection sampling
    rollback_s: float = 0.0  # cropping the target's cache and updating the drafter
    policy_s: float = 0.0  # choosing K and recording the step's costs
    detokenize_s: float = 0.0  # appending tokens to the reply: stop checks and incremental detokenisation
    event_s: float = 0.0  # building step events and the consumer's time between them (GUI, printing)

    OVERHEAD_PARTS = ("accept_s", "rollback_s", "policy_s", "detokenize_s", "event_s")

    @property
    def other_s(self) -> float:
        """Time outside the models: the verification rule, cache cropping, detokenisation, events, Python."""
        return max(0.0, self.wall_s - self.prefill_s - self.draft_s - self.verify_s)

    @property
    def iid_alpha(self) -> float:
        """Leviathan's per-token acceptance rate under the i.i.d. model, estimated from truncated trials: each
        draft step is a run of successes cut at the first failure, so alpha = accepted / (accepted + failures).
        (accepted / proposed also counts the tokens proposed after a rejection, which were never tried.)"""
        trials = self.draft_accepted + self.rejected_steps
        return self.draft_accepted / trials if trials else 0.0

    @property
    def alpha(self) -> float:
        """Acceptance rate: accepted draft tokens / proposed draft tokens."""
        return self.draft_accepted / self.draft_proposed if self.draft_proposed else 0.0

    @property
    def tau(self) -> float:
        """Mean tokens produced per target forward pass (1.0 for plain decoding)."""
        return self.new_tokens / self.target_passes if self.target_passes else 0.0

    @property
    def mean_k(self) -> float:
        """Mean draft length over the steps that had a draft."""
        return self.draft_proposed / self.draft_steps if self.draft_steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        """Speed after the prompt is processed: the same for every drafter's prompt, so speedups compare this."""
        decode_s = self.wall_s - self.prefill_s
        return self.new_tokens / decode_s if decode_s > 0 else 0.0

    MIN_PLAIN_STEPS = 8  # plain_step_s: fewer plain steps than this are too few to average

    @property
    def plain_step_s(self) -> float | None:
        """Seconds a token of plain decoding takes as this generation's own plain steps (K = 0) show it: their mean
        target pass, plus the mean of what its steps spent outside the target's passes, drafting and the K policy
        (the verification rule, cropping the cache, detokenising, events), which plain decoding pays per step too
        (put together so, a plain run's own figures give its steps' seconds within 0.2%). None with fewer than
        MIN_PLAIN_STEPS plain steps.

        A baseline measured in the same run, at the reply's own depth and in its own moment: a pass over a deep
        context costs more (the embedded model decodes plainly at 105 tok/s after 38 prompt tokens, 80-86 after
        419 and 22 after 4,021: docs/performance.md, "The chat's speedup against its own plain steps"), and the
        machine's speed moves between a calibration and a reply. Not for a device whose passes are only queued
        in the verify phase (CUDA: their time lands in the verification rule's)."""
        plain_steps = self.steps_by_k[0] if self.steps_by_k else 0
        if plain_steps < self.MIN_PLAIN_STEPS:
            return None
        outside = max(0.0, self.other_s - self.policy_s) / sum(self.steps_by_k)
        return self.verify_s_by_k[0] / plain_steps + outside

    @property
    def plain_decode_tokens_per_s(self) -> float | None:
        """What decode_tokens_per_s would read for plain decoding of this generation's tokens at plain_step_s a
        token (the first token comes with the prompt's reading, as in every mode), or None (plain_step_s)."""
        step_s = self.plain_step_s
        if step_s is None or self.new_tokens < 2 or step_s <= 0:
            return None
        return self.new_tokens / ((self.new_tokens - 1) * step_s)

    @property
    def acceptance_by_position(self) -> list[float]:
        """P(draft token i accepted | it was proposed), i = 0 .. K-1."""
        return [a / p if p else 0.0 for a, p in zip(self.accepted_by_position, self.proposed_by_position)]

    @property
    def draft_cost_ratio(self) -> float:
        """c in Leviathan et al.: time of one draft forward / time of one target forward."""
        verify_passes = self.target_passes - 1
        if not self.draft_forwards or verify_passes <= 0 or self.verify_s <= 0:
            return 0.0
        return (self.draft_s / self.draft_forwards) / (self.verify_s / verify_passes)

    @property
    def predicted_speedup(self) -> float:
        """Leviathan et al. (2023), eq. 1: E[speedup] = (1 - a^(g+1)) / ((1 - a)(g c + 1)).

        a = acceptance rate, g = draft length, c = draft/target cost ratio. It assumes i.i.d. acceptance and that
        verifying g+1 tokens costs one target step, so on a CPU (where it does not) it is an upper bound.
        """
        a, g, c = self.alpha, self.mean_k, self.draft_cost_ratio
        if g <= 0:
            return 1.0
        return expected_tokens(a, g) / (g * c + 1)

    def record_step(self, k: int, n: int, draft_forwards: int, seconds: Mapping[str, float]) -> None:
        """Adds one verification step: k draft tokens checked, n of them accepted, `draft_forwards` draft-model
        passes, and the step's seconds per phase (engine/decoding/timing.py's Profile: draft, verify, accept, rollback,
        policy, detokenize)."""
        verify_s = seconds.get("verify", 0.0)
        self.target_passes += 1
        self.draft_forwards += draft_forwards
        self.draft_s += seconds.get("draft", 0.0)
        self.verify_s += verify_s
        self.accept_s += seconds.get("accept", 0.0)
        self.rollback_s += seconds.get("rollback", 0.0)
        self.policy_s += seconds.get("policy", 0.0)
        self.detokenize_s += seconds.get("detokenize", 0.0)
        grow = k + 1 - len(self.steps_by_k)
        if grow > 0:
            self.steps_by_k.extend([0] * grow)
            self.verify_s_by_k.extend([0.0] * grow)
        self.steps_by_k[k] += 1
        self.verify_s_by_k[k] += verify_s
        if k == 0:
            return
        self.rejected_steps += n < k
        self.draft_steps += 1
        self.draft_proposed += k
        self.draft_accepted += n
        grow = k - len(self.proposed_by_position)
        if grow > 0:
            self.proposed_by_position.extend([0] * grow)
            self.accepted_by_position.extend([0] * grow)
        for i in range(k):
            self.proposed_by_position[i] += 1
        for i in range(n):
            self.accepted_by_position[i] += 1

    def copy(self) -> GenerationStats:
        return dataclasses.replace(
            self,
            proposed_by_position=list(self.proposed_by_position),
            accepted_by_position=list(self.accepted_by_position),
            steps_by_k=list(self.steps_by_k),
            verify_s_by_k=list(self.verify_s_by_k),
        )

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        for name in ("other_s", "alpha", "iid_alpha", "tau", "mean_k", "tokens_per_s", "acceptance_by_position",
                     "draft_cost_ratio", "predicted_speedup"):
            data[name] = getattr(self, name)
        return data


@dataclass(frozen=True)
class GenerationResult:
    """The whole reply once generation has ended."""

    text: str
    token_ids: tuple[int, ...]
    origins: tuple[Origin, ...]
    spans: tuple[tuple[int, int], ...]  # character range of each token in `text`
    finish_reason: str  # "eos", "stop", "length", "context" or "cancelled"
    stats: GenerationStats
    seed: int
    # where this generation's text begins in `text`: a continued reply's (SpeculativeEngine.stream's `continuing`)
    # earlier text comes first, decoded from its tokens; token_ids, origins and spans are the new tokens'
    text_start: int = 0

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "token_ids": list(self.token_ids),
            "origins": [origin_name(o) for o in self.origins],
            "spans": [list(s) for s in self.spans],
            "finish_reason": self.finish_reason,
            "seed": self.seed,
            "stats": self.stats.to_dict(),
        }


@dataclass(frozen=True)
class StepEvent:
    """What one engine step appended to the reply.

    `token_ids[i]` came from `origins[i]` and covers `text[spans[i][0]:spans[i][1]]` of the final text (a token that
    ends inside a multi-byte character has an empty span; the character goes to the token that completes it).
    `rejected_ids` are the draft proposals the target refused at this step, in the order proposed. `wall_s` is when
    the step's tokens were ready, in seconds from the start of the generation (the prompt's processing included).

    `stats` is the generation's running statistics: the same object on every event of one generation, updated in
    place as the generation goes on (no copy per step). It holds this step's figures while the event is being
    handled on the thread that iterates the stream; a consumer that reads it later, or on another thread, takes what
    it needs there (stats.copy(): the chat's worker, once a batch) or reads figures "so far" (the race's lanes, the
    API's chunks). The last event's `result` holds a copy of the final figures.
    """

    token_ids: tuple[int, ...]
    origins: tuple[Origin, ...]
    spans: tuple[tuple[int, int], ...]
    text_delta: str
    text_offset: int  # where text_delta starts in the reply text
    rejected_ids: tuple[int, ...]
    rejected_text: str
    stats: GenerationStats
    wall_s: float
    finish_reason: str | None = None
    result: GenerationResult | None = None  # set on the last event only

    def runs(self) -> list[tuple[str, Origin]]:
        """The step's text cut into runs of one origin, in order (spans are offsets into the whole reply)."""
        return origin_runs(self.text_delta, self.spans, self.origins, self.text_offset)


def origin_runs(text: str, spans, origins, offset: int = 0) -> list[tuple[str, Origin]]:
    """Consecutive tokens of one origin joined: [(text, origin), ...]; `spans` index text as if it began at
    `offset`. Tokens with no text of their own (inside a multi-byte character) are skipped."""
    runs: list[tuple[str, Origin]] = []
    for (start, end), origin in zip(spans, origins):
        piece = text[start - offset : end - offset]
        if not piece:
            continue
        if runs and runs[-1][1] == origin:
            runs[-1] = (runs[-1][0] + piece, origin)
        else:
            runs.append((piece, origin))
    return runs
