"""The speculative decoding loop (Leviathan et al. 2023; Chen et al. 2023).

Each step: the drafter proposes K tokens; the target scores [last token, x_1..x_K] in ONE forward pass, giving its
distributions p_1..p_{K+1}; the verification rule keeps a prefix x_1..x_n and adds one token of the target's own, so
every step yields between 1 and K+1 tokens for one target pass. The target's KV cache is never re-filled: positions
of rejected draft tokens are cropped off. K = 0 is plain decoding, through the same code and events.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch

from .adaptive import DraftLengthPolicy, StepCosts
from .drafters import Drafter, NoDrafter
from .errors import PrefillCancelled, PromptError
from .events import GenerationResult, GenerationStats, Origin, StepEvent
from .reply import Emission, Reply
from .runners import TargetRunner, TorchRunner
from .sampling import Sampler, SamplingParams, verify_greedy, verify_stochastic


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    k: int = 5  # the draft length, or the starting one when adaptive
    adaptive_k: bool = True
    k_max: int = 16
    seed: int | None = None  # None picks one (and reports it) so every run can be reproduced
    stop_strings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"K must be at least 1 (got {self.k})")
        if self.max_new_tokens < 1:
            raise ValueError(f"max new tokens must be at least 1 (got {self.max_new_tokens})")


class SpeculativeEngine:
    """Generates with a target model and a drafter; the output is what the target alone would produce."""

    def __init__(self, target: torch.nn.Module | TargetRunner, tokenizer, drafter: Drafter | None = None,
                 eos_token_ids: Sequence[int] | None = None, **torch_options):
        """target: a TargetRunner (engine/runners.py), or a transformers model, which runs through a TorchRunner
        made with `torch_options` (static_cache, compile_steps, tuned_head, lean, packed_weights: see TorchRunner).
        A drafter that reads the target's hidden states gets them from every pass, the prefill included."""
        self.tokenizer = tokenizer
        self.drafter = drafter or NoDrafter()
        self._keeps_features = self.drafter.wants_target_features
        self._reads_context = self._keeps_features and self.drafter.reads_context
        if isinstance(target, torch.nn.Module):
            self.target = target
            self.runner: TargetRunner = TorchRunner(target, keeps_features=self._keeps_features, **torch_options)
        else:
            if torch_options:
                raise ValueError(f"{', '.join(torch_options)}: options of the torch runner only")
            if self._keeps_features and not target.keeps_features:
                raise ValueError("the drafter reads the target's hidden states; this runner does not keep them")
            self.target = None
            self.runner = target
        self.device = self.runner.device
        if eos_token_ids is None:
            eos_token_ids = default_eos_ids(self.target, tokenizer)
        self.eos_token_ids = set(eos_token_ids)
        self.context_window = self.runner.context_window
        self.vocab_size = self.runner.vocab_size
        self.step_costs = StepCosts()  # measured per engine, reused by every generation
        self.acceptance: dict = {}  # the draft-length policy's acceptance per confidence class, kept likewise

    def generate(self, prompt_ids: Sequence[int], config: GenerationConfig, cancel: threading.Event | None = None,
                 on_event: Callable[[StepEvent], None] | None = None) -> GenerationResult:
        for event in self.stream(prompt_ids, config, cancel):
            if on_event is not None:
                on_event(event)
            if event.result is not None:
                return event.result
        raise RuntimeError("generation ended without a result")  # unreachable: stream always ends with one

    @torch.inference_mode()
    def stream(self, prompt_ids: Sequence[int], config: GenerationConfig,
               cancel: threading.Event | None = None) -> Iterator[StepEvent]:
        """Yields one StepEvent per target pass; the last one has finish_reason and result set."""
        prompt = self._checked_prompt(prompt_ids)
        seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**31)
        sampler = Sampler(config.sampling, seed, self.device)
        room = self.context_window - len(prompt)
        reply = Reply(self.tokenizer, self.eos_token_ids, config.stop_strings, min(config.max_new_tokens, room),
                      length_reason="context" if room < config.max_new_tokens else "length")
        stats = GenerationStats(prompt_tokens=len(prompt))
        # Greedy output does not depend on K, so K may follow the clock; a seeded sample must not (StepCosts.fixed).
        costs = self.step_costs if sampler.greedy else StepCosts.fixed(self.drafter.uses_model)
        # Likewise the acceptance estimates carry over between greedy replies only: a seeded sample must not depend
        # on the replies before it.
        acceptance = self.acceptance if sampler.greedy else {}
        policy = DraftLengthPolicy(k=config.k, k_max=config.k_max, adaptive=config.adaptive_k, costs=costs,
                                   acceptance=acceptance)
        started = time.perf_counter()

        # Room for the prompt, the reply and one step's drafts beyond it (rejected positions are written, then
        # rolled back).
        cache = self.runner.new_cache(len(prompt) + reply.max_new_tokens + config.k_max + 1)
        try:  # a long prompt is run in chunks, and a Stop (or closing the app) is heard between them
            logits = self.runner.forward(torch.tensor([prompt], device=self.device), cache, keep=1, prefill=True,
                                         hidden_rows=len(prompt) if self._reads_context else 1, cancel=cancel)[0]
        except PrefillCancelled:
            stats.prefill_s = stats.wall_s = time.perf_counter() - started
            yield self._event(0, reply.finish("cancelled"), (), stats, reply, seed, finished=True)
            return
        first = sampler.next_token(logits)
        stats.target_passes = 1
        stats.prefill_s = time.perf_counter() - started
        self.drafter.begin(prompt, sampler, self.vocab_size)
        if self._keeps_features:  # row i produced token i + 1 of the context
            features = self.runner.features
            self.drafter.accept_target_states(features, (prompt[1:] + [first])[-len(features):])
        context = prompt + [first]
        emission = reply.append([first], [Origin.TARGET])
        rejected: tuple[int, ...] = ()
        step = 0
        while True:
            if reply.finish_reason is None and cancel is not None and cancel.is_set():
                emission = _merge(emission, reply.finish("cancelled"))
            finished = reply.finish_reason is not None
            stats.new_tokens = len(reply.token_ids)
            t_event = time.perf_counter()
            stats.wall_s = t_event - started
            event = self._event(step, emission, rejected, stats, reply, seed, finished)
            yield event
            stats.event_s += time.perf_counter() - t_event  # building it, and whatever the consumer did with it
            if finished:
                return
            step += 1
            emission, rejected = self._step(context, cache, sampler, policy, reply, stats)

    def _step(self, context: list[int], cache, sampler: Sampler, policy: DraftLengthPolicy, reply: Reply,
              stats: GenerationStats) -> tuple[Emission, tuple[int, ...]]:
        # Room for K drafts plus the target's token within both the token budget and the context window.
        limit = min(reply.remaining - 1, self.context_window - len(context))
        clock = _Clock()
        draft, free, policy_s = self._propose(context, limit, policy)
        draft_tokens = draft.tokens if draft is not None else []
        draft_s = clock.lap() - policy_s

        k = len(draft_tokens)
        logits = self.runner.forward(torch.tensor([[context[-1], *draft_tokens]], device=self.device), cache, keep=k + 1)
        verify_s = clock.lap()  # on a GPU this includes the wait for the kernels: the rule below needs the logits
        if sampler.greedy:
            n, next_token = verify_greedy(logits, draft_tokens)
        else:
            q = draft.probs[:k] if draft is not None and draft.probs is not None else None
            n, next_token = verify_stochastic(sampler.probs(logits), draft_tokens, q, sampler)
        accept_s = clock.lap()

        # Keep [.. last token, x_1..x_n]; the next input is next_token. The cache holds len(context) + k positions.
        self.runner.rollback(cache, len(context) + n, length=len(context) + k)
        accepted = draft_tokens[:n] + [next_token]
        context.extend(accepted)
        if k:
            self.drafter.update(context, n)
        if self._keeps_features:  # row i of the verified input produced accepted[i]
            self.drafter.accept_target_states(self.runner.features[: n + 1], accepted)
        rollback_s = clock.lap()
        policy.observe(k, n, verify_s=verify_s, draft_s=draft_s, confidence=draft.confidence if draft else None,
                       free=free)
        policy_s += clock.lap()
        emission = reply.append(accepted, [Origin.DRAFT] * n + [Origin.TARGET])
        _record_step(stats, k, n, draft_s=draft_s, verify_s=verify_s, draft_forwards=draft.forwards if draft else 0,
                     accept_s=accept_s, rollback_s=rollback_s, policy_s=policy_s, detokenize_s=clock.lap())
        return emission, tuple(draft_tokens[n:])

    def _propose(self, context: list[int], limit: int, policy: DraftLengthPolicy):
        """The draft for this step, cut to the length the policy chose; (draft or None, free, seconds in the
        policy). A model drafter first offers its free proposal (prompt lookup), which wins when its class is
        expected to yield more tokens per second than running the draft model."""
        forwards_before = self.drafter.forward_count
        free = False
        policy_s = 0.0
        if self.drafter.uses_model:
            draft = self.drafter.free_proposal(context, min(limit, policy.k_max)) if limit > 0 else None
            t_policy = time.perf_counter()
            if draft is not None and policy.free_beats_model(limit, draft.acceptance_class):
                free = True
                k_wanted = policy.choose(limit, draft.acceptance_class, free=True)
            else:
                k_wanted = policy.choose(limit)
                draft = None
            policy_s += time.perf_counter() - t_policy
            if not free:
                draft = self.drafter.propose(context, k_wanted) if k_wanted > 0 else None
        else:
            draft = self.drafter.propose(context, min(limit, policy.k_max)) if limit > 0 else None
            t_policy = time.perf_counter()
            k_wanted = policy.choose(limit, draft.acceptance_class) if draft is not None else 0
            policy_s += time.perf_counter() - t_policy
        if draft is None or k_wanted == 0:
            return None, free, policy_s
        return _Proposal(draft.tokens[:k_wanted], draft.probs, draft.acceptance_class,
                         self.drafter.forward_count - forwards_before), free, policy_s

    def new_cache(self, tokens: int):
        """A KV cache with room for `tokens` positions, of the kind this engine's passes use (for measurements)."""
        return self.runner.new_cache(tokens)

    def forward(self, input_ids: torch.Tensor, cache, keep: int = 1, prefill: bool = False) -> torch.Tensor:
        """One target pass as the engine runs it (its runner's forward path and output head): logits [keep, vocab]."""
        return self.runner.forward(input_ids, cache, keep, prefill=prefill)

    def _checked_prompt(self, prompt_ids: Sequence[int]) -> list[int]:
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise PromptError("the prompt is empty")
        if len(prompt) >= self.context_window:
            raise PromptError(f"the prompt has {len(prompt)} tokens but the model's context window holds "
                              f"{self.context_window}; shorten it")
        return prompt

    def _event(self, step: int, emission: Emission, rejected: tuple[int, ...], stats: GenerationStats,
               reply: Reply, seed: int, finished: bool) -> StepEvent:
        snapshot = stats.copy()
        result = None
        if finished:
            result = GenerationResult(text=reply.text, token_ids=tuple(reply.token_ids),
                                      origins=tuple(reply.origins), spans=tuple(reply.spans),
                                      finish_reason=reply.finish_reason, stats=snapshot, seed=seed)
        return StepEvent(
            step=step, token_ids=tuple(emission.token_ids), origins=tuple(emission.origins),
            spans=tuple(emission.spans), text_delta=emission.text_delta, text_offset=emission.text_offset,
            rejected_ids=rejected,
            rejected_text=self.tokenizer.decode(list(rejected), skip_special_tokens=True) if rejected else "",
            stats=snapshot, finish_reason=reply.finish_reason if finished else None, result=result,
        )


@dataclass
class _Proposal:
    """A draft cut to the chosen length, with how many draft-model forwards it took."""

    tokens: list[int]
    probs: torch.Tensor | None
    confidence: int | tuple[str, int] | None  # the acceptance class
    forwards: int


class _Clock:
    """Seconds since the previous lap (perf_counter: the CPU's monotonic clock, ~100 ns a call)."""

    def __init__(self):
        self._last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        return elapsed


def _record_step(stats: GenerationStats, k: int, n: int, draft_s: float, verify_s: float, draft_forwards: int,
                 accept_s: float = 0.0, rollback_s: float = 0.0, policy_s: float = 0.0,
                 detokenize_s: float = 0.0) -> None:
    stats.target_passes += 1
    stats.draft_s += draft_s
    stats.verify_s += verify_s
    stats.draft_forwards += draft_forwards
    stats.accept_s += accept_s
    stats.rollback_s += rollback_s
    stats.policy_s += policy_s
    stats.detokenize_s += detokenize_s
    grow = k + 1 - len(stats.steps_by_k)
    if grow > 0:
        stats.steps_by_k.extend([0] * grow)
        stats.verify_s_by_k.extend([0.0] * grow)
    stats.steps_by_k[k] += 1
    stats.verify_s_by_k[k] += verify_s
    if k == 0:
        return
    stats.rejected_steps += n < k
    stats.draft_steps += 1
    stats.draft_proposed += k
    stats.draft_accepted += n
    grow = k - len(stats.proposed_by_position)
    if grow > 0:
        stats.proposed_by_position.extend([0] * grow)
        stats.accepted_by_position.extend([0] * grow)
    for i in range(k):
        stats.proposed_by_position[i] += 1
    for i in range(n):
        stats.accepted_by_position[i] += 1


def _merge(first: Emission, second: Emission) -> Emission:
    """Two consecutive emissions as one (the second starts where the first ended)."""
    if not first.token_ids:
        return second
    return Emission(first.token_ids + second.token_ids, first.origins + second.origins, first.spans + second.spans,
                    first.text_delta + second.text_delta, first.text_offset)


def default_eos_ids(model: torch.nn.Module | None, tokenizer) -> set[int]:
    """End-of-sequence ids from the generation config and the tokenizer (chat models often end turns with their
    own token, e.g. <|im_end|>, listed in the generation config)."""
    ids: set[int] = set()
    generation_config = getattr(model, "generation_config", None)
    configured = getattr(generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(configured)
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
