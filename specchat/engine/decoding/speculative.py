"""The speculative decoding loop (Leviathan et al. 2023; Chen et al. 2023).

Each step: the drafter proposes K tokens; the target scores [last token, x_1..x_K] in ONE forward pass, giving its
distributions p_1..p_{K+1}; the verification rule keeps a prefix x_1..x_n and adds one token of the target's own, so
every step yields between 1 and K+1 tokens for one target pass. The target's KV cache is never re-filled: positions
of rejected draft tokens are cropped off. K = 0 is plain decoding, through the same code and events.

Structure: `SpeculativeEngine` runs the target through a TargetRunner (engine/backends/torch/runners.py; `runner_for` chooses a
transformers model's forward path, and the engine holds no options of its own). `stream` runs the prefill, then one
`_step` per target pass: propose (`_propose`: the drafter and the draft-length policy), verify, accept, roll back,
emit. Each phase is timed by a timing.Profile, and `GenerationStats.record_step` adds the step's counts and seconds.
What the drafter is beyond propose and update the engine reads once, from the protocols it implements and its
Capabilities (drafting/base.py).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch

from ...core.errors import PrefillCancelled, PromptError
from ...core.one_time import OneTimeWork
from ...core.vocabulary import CANCELLED, CONTEXT, EOS, LENGTH, Origin
from ..backends.torch.host_syncs import HostToDevice
from ..backends.torch.runners import ReadsAhead, TargetRunner, runner_for
from ..drafting.base import (Draft, Drafter, FreeProposer, GenerationState, NoDrafter, TargetStateReader,
                             check_capabilities)
from .adaptive import DRAFT_PRIOR, AcceptanceBook, DraftLengthPolicy, StepCosts
from .cost_curve import FIXED_CURVE, CostCurve
from .events import GenerationResult, GenerationStats, StepEvent
from .on_device import verify_greedy_on_device, verify_stochastic_on_device
from .reply import Emission, Reply
from .sampling import Sampler, SamplingParams, verify_greedy, verify_stochastic
from .timing import Profile


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    k: int = 5  # the draft length, or the starting one when adaptive
    adaptive_k: bool = True
    k_max: int = 63  # the longest draft: 64-token checks pay on copying replies (cost_curve.py)
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
                 eos_token_ids: Sequence[int] | None = None,
                 cost_curve: CostCurve | Callable[[], CostCurve | None] | None = None,
                 one_time: OneTimeWork | None = None):
        """target: a TargetRunner (engine/backends/torch/runners.py: `runner_for(model, keeps_features=..., **options)` makes one
        for a transformers model with options), or a transformers model, run through `runner_for` with its
        defaults. A drafter that reads the target's hidden states gets them from every pass, the prefill included,
        so its runner must keep them. cost_curve: the target's verification cost curve, which the draft-length
        policy prices on (ModelPair.engine measures it), or a function that gives it once it is known (None
        before: greedy replies with adaptive K then draft nothing); None: the runner's, else FIXED_CURVE.
        one_time: the model's one-time measurements (core/one_time.py), which never run beside a reply. TypeError
        for a drafter whose capabilities contradict its protocols (drafting/base.py: check_capabilities)."""
        self.tokenizer = tokenizer
        self.drafter = drafter or NoDrafter()
        self.capabilities = check_capabilities(self.drafter)
        self._keeps_features = isinstance(self.drafter, TargetStateReader)
        self._begins = isinstance(self.drafter, GenerationState)
        self._offers_free = isinstance(self.drafter, FreeProposer)
        self._reads_context = self._keeps_features and self.capabilities.reads_context
        if isinstance(target, torch.nn.Module):
            target = runner_for(target, keeps_features=self._keeps_features)
        if self._keeps_features and not target.keeps_features:
            raise ValueError("the drafter reads the target's hidden states; this runner does not keep them")
        self.runner: TargetRunner = target
        model = getattr(target, "target", None)  # the transformers model, if any (TorchRunner, StaticCacheRunner)
        self.target = model if isinstance(model, torch.nn.Module) else None
        self.device = self.runner.device
        if eos_token_ids is None:
            eos_token_ids = default_eos_ids(self.target, tokenizer)
        self.eos_token_ids = set(eos_token_ids)
        self.context_window = self.runner.context_window
        # A runner whose passes stay bit-identical to one-token passes only up to some number of rows (llama.cpp's
        # kernels change at a size: engine/backends/llamacpp/kernels.py) caps K so that every verification stays within it.
        self.vocab_size = self.runner.vocab_size
        self._curve_source = cost_curve if callable(cost_curve) else None
        self.one_time = one_time
        # the costs and acceptance the draft-length policy learns, per engine, shared by its greedy replies
        curve = None if callable(cost_curve) else cost_curve
        self.step_costs = StepCosts(curve=curve or getattr(self.runner, "cost_curve", None) or FIXED_CURVE)
        self._curve_known = self._curve_source is None
        self._stage = HostToDevice(self.device)  # host tokens onto the device without a wait
        # True: the draft and verify phases wait for the device before they close, so a profile (`specchat bench
        # --profile`, `specchat gpu-check`) puts the GPU's time where it is spent; two waits more per step, so off
        # otherwise. Nothing to wait for off a GPU.
        self.settle_phases = False
        self.acceptance = AcceptanceBook()

    @property
    def max_draft(self) -> int:
        """The most tokens one step may draft: a runner whose passes stay bit-identical to one-token passes only up
        to some number of rows (llama.cpp's kernels change at a size: engine/backends/llamacpp/kernels.py) caps K so
        that every verification stays within it. Read at every step: the cap may be set after the engine is made
        (a verdict measured in the background)."""
        rows = getattr(self.runner, "max_pass_rows", None)
        return rows - 1 if rows else 1 << 30

    def generate(self, prompt_ids: Sequence[int], config: GenerationConfig,
                 continuing: Sequence[int] = ()) -> GenerationResult:
        """The whole reply to `prompt_ids` under `config` at once (the last StepEvent's result), for callers that
        need no stream: measurements, the self-test, divergence checks; `continuing` as in stream."""
        for event in self.stream(prompt_ids, config, continuing=continuing):
            if event.result is not None:
                return event.result
        raise RuntimeError("generation ended without a result")  # unreachable: stream always ends with one

    @torch.inference_mode()
    def stream(self, prompt_ids: Sequence[int], config: GenerationConfig, cancel: threading.Event | None = None,
               continuing: Sequence[int] = ()) -> Iterator[StepEvent]:
        """Yields one StepEvent per target pass; the last one has finish_reason and result set. While it runs, the
        model's one-time measurements wait (one_time).

        `continuing`: the tokens of a reply to `prompt_ids` that was cut short (Stop, the token limit), to go on
        with. They are read after the prompt as the reply's own steps read them (_read_reply), and the reply goes
        on from its last token: up to config.max_new_tokens new tokens, only those emitted, with their spans in the
        whole reply's text, which the result's text is (Reply's `before`). A greedy reply so continued is, token
        for token, the reply that was never cut, where passes are bit-identical to one-token passes."""
        with self.one_time.reply() if self.one_time is not None else contextlib.nullcontext():
            yield from self._stream(prompt_ids, config, cancel, [int(t) for t in continuing])

    def _stream(self, prompt_ids: Sequence[int], config: GenerationConfig, cancel: threading.Event | None,
                written: list[int]) -> Iterator[StepEvent]:
        prompt = self._checked_prompt([*prompt_ids, *written])
        seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**31)
        sampler = Sampler(config.sampling, seed, self.device)
        room = self.context_window - len(prompt)
        reply = Reply(self.tokenizer, self.eos_token_ids, config.stop_strings, min(config.max_new_tokens, room),
                      length_reason=CONTEXT if room < config.max_new_tokens else LENGTH, before=written)
        stats = GenerationStats(prompt_tokens=len(prompt))
        stats.awaiting_costs = self._awaits_costs(config)
        policy = self._policy(config, sampler.greedy, stats.awaiting_costs)
        run = Profile()  # the generation's phases (prefill, event); its elapsed time is the wall time
        with run.phase("prefill"):
            # Room for the prompt, the reply and one step's drafts beyond it (rejected positions are written, then
            # rolled back).
            cache = self.runner.new_cache(len(prompt) + reply.max_new_tokens + min(config.k_max, self.max_draft) + 1)
            first, features = self._prefill(prompt, cache, sampler, cancel, len(written),
                                            min(config.k_max, self.max_draft) + 1)
        stats.prefill_s = run.seconds["prefill"]
        stats.prompt_reused = getattr(self.runner, "reused_tokens", 0)
        stats.prompt_restored = getattr(self.runner, "restored_tokens", 0)
        if first is None:  # a Stop (or closing the app) was heard between the prompt's chunks
            stats.wall_s = stats.prefill_s
            yield self._event(reply.finish(CANCELLED), (), stats, reply, seed, finished=True)
            return
        stats.target_passes = 1
        self._begin_drafting(prompt, first, sampler, features)
        context = prompt + [first]
        emission = reply.append([first], [Origin.TARGET])
        rejected: tuple[int, ...] = ()
        while True:
            if reply.finish_reason is None and cancel is not None and cancel.is_set():
                emission = _merge(emission, reply.finish(CANCELLED))
            finished = reply.finish_reason is not None
            if finished and reply.finish_reason == EOS and isinstance(self.runner, ReadsAhead):
                self.runner.read_ahead(prompt + reply.token_ids)  # the next turn's prompt starts with these
            stats.new_tokens = len(reply.token_ids)
            with run.phase("event"):  # building it, and whatever the consumer did with it
                stats.wall_s = run.elapsed()
                yield self._event(emission, rejected, stats, reply, seed, finished)
            stats.event_s = run.seconds["event"]
            if finished:
                return
            emission, rejected = self._step(context, cache, sampler, policy, reply, stats)

    def _awaits_costs(self, config: GenerationConfig) -> bool:
        """Whether this reply's drafter is held back because the cost curve is not known yet: nothing is known to
        pay, so a first reply, greedy or sampled, decodes plainly, at plain decoding's speed. Only an adaptive
        reply asks (a fixed K drafts anyway), and plain decoding never does: asking may measure the curve then
        and there."""
        return config.adaptive_k and not isinstance(self.drafter, NoDrafter) and not self._knows_curve()

    def _policy(self, config: GenerationConfig, greedy: bool, awaiting_costs: bool) -> DraftLengthPolicy:
        # Greedy output does not depend on K, so K may follow the clock; a seeded sample must not (StepCosts.fixed),
        # but it prices on the same measured curve: on a made-up one (+10% a row) a sampled reply of the embedded
        # model drafted 16-token checks that cost 6.8 one-token passes here, and ran at 0.86-0.90x plain.
        draft_prior = (self.step_costs.draft_prior or DRAFT_PRIOR) if self.capabilities.uses_model else 0.0
        costs = self.step_costs if greedy else StepCosts.fixed(self.step_costs.curve, draft_prior)
        # Likewise the acceptance estimates carry over between greedy replies only: a seeded sample must not depend
        # on the replies before it.
        book = self.acceptance if greedy else AcceptanceBook()
        k_max = 0 if awaiting_costs else min(config.k_max, self.max_draft)
        return DraftLengthPolicy(k=min(config.k, max(self.max_draft, 1)), k_max=k_max,
                                 adaptive=config.adaptive_k, costs=costs, book=book)

    def _knows_curve(self) -> bool:
        """Whether the cost curve is known; asks its source once more if not (measured in the background)."""
        if not self._curve_known:
            curve = self._curve_source()
            if curve is not None:
                self._curve_known = True
                if not self.step_costs.frozen:  # fixed costs stay fixed
                    self.step_costs.curve = curve
        return self._curve_known

    def _prefill(self, prompt: list[int], cache, sampler: Sampler, cancel: threading.Event | None, written: int = 0,
                 pass_rows: int = 1) -> tuple[int | None, torch.Tensor | None]:
        """The prompt's pass and the first token, with the target's hidden states of the positions read (for a
        drafter that keeps them; None otherwise); no token when `cancel` was set between the prompt's chunks. The
        last `written` tokens of `prompt` are a reply being continued: read after the rest as its steps read them
        (_read_reply, in passes of at most pass_rows)."""
        head = prompt[:len(prompt) - written]
        try:
            logits = self.runner.forward(torch.tensor([head], device=self.device), cache, keep=1, prefill=True,
                                         hidden_rows=len(head) if self._reads_context else 1, cancel=cancel)[0]
            features = self.runner.features if self._keeps_features else None
            if written:
                logits, features = self._read_reply(prompt[len(head):], cache, cancel, pass_rows, features)
        except PrefillCancelled:
            return None, None
        return sampler.next_token(logits), features

    def _read_reply(self, tokens: list[int], cache, cancel: threading.Event | None, pass_rows: int,
                    features: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A continued reply's own tokens read after its prompt, in passes of at most `pass_rows` tokens on the
        decoding passes' kernels, as its verification steps read them: where a pass of that many rows gives each
        row the numbers of one-token passes (llama.cpp's bit-identical kernels: max_pass_rows), each position holds
        the numbers the reply's own steps gave it, so the reply goes on as if never cut. (A prefill would read them
        on the prompt's kernels, whose rounding differs.) Returns the last position's logits and the hidden states
        so far, the prompt's first (`features`; None: not kept). PrefillCancelled when `cancel` is set between
        passes."""
        kept = [features] if features is not None else []
        logits = None
        for start in range(0, len(tokens), pass_rows):
            if cancel is not None and cancel.is_set():
                raise PrefillCancelled
            chunk = tokens[start:start + pass_rows]
            logits = self.runner.forward(self._stage.tokens(chunk).view(1, -1), cache,
                                         keep=len(chunk) if features is not None else 1)
            if features is not None:
                kept.append(self.runner.features)
        return logits[-1], torch.cat(kept) if kept else None

    def _begin_drafting(self, prompt: list[int], first: int, sampler: Sampler,
                        features: torch.Tensor | None) -> None:
        """Before the first proposal: a drafter with state per generation begins one, and one that reads the
        target's hidden states gets those of the positions read (`features`)."""
        if self._begins:
            self.drafter.begin(prompt, sampler, self.vocab_size)
        if self._keeps_features:  # row i produced token i + 1 of the context
            self.drafter.accept_target_states(features, (prompt[1:] + [first])[-len(features):])

    def _step(self, context: list[int], cache, sampler: Sampler, policy: DraftLengthPolicy, reply: Reply,
              stats: GenerationStats) -> tuple[Emission, tuple[int, ...]]:
        """One step, as gpt-fast's speculative_decode: propose, verify, accept, roll back, emit. Returns what it
        added to the reply and the rejected drafts; its counts and seconds per phase go to `stats`."""
        # Room for K drafts plus the target's token within both the token budget and the context window.
        limit = min(reply.remaining - 1, self.context_window - len(context), self.max_draft)
        profile = Profile()
        # Propose x_1..x_K (with their q_i when the drafter samples); K is the policy's choice, timed as its own.
        with profile.phase("draft"):
            proposed = self._propose(context, limit, policy, profile)
        draft = proposed.draft
        k = draft.length if draft is not None else 0
        # Verify: ONE target pass over [x_0, x_1..x_K] (x_0 = context[-1], not yet cached); row i of the logits is
        # p_{i+1} = p(. | context, x_1..x_i), i = 0..K. On a GPU the pass is only queued here (the host runs on);
        # with `settle_phases` the phase waits for it, so that a profile puts the GPU's time under verification.
        with profile.phase("verify"):
            logits = self.runner.forward(self._verification_input(context[-1], draft), cache, keep=k + 1)
            self._settle()
        # Accept the longest prefix x_1..x_n that passes (greedy: x_i = argmax p_i; sampling: u_i < p_i(x_i) /
        # q_i(x_i)), then one token of the target's own: from p_{n+1}, or at a rejection from the residual
        # norm(max(0, p_{n+1} - q_{n+1})), so each token is distributed as under the target alone. The host reads
        # the outcome here, in the step's one wait for the device (a draft left on the device is read with it).
        with profile.phase("accept"):
            n, next_token, tokens = _verify(logits, draft, sampler)
        accepted = tokens[:n] + [next_token]
        # Roll back: the cache holds len(context) + K positions; keep [.., x_0, x_1..x_n] and drop x_{n+1}..x_K.
        # next_token is the next step's x_0.
        with profile.phase("rollback"):
            self.runner.rollback(cache, len(context) + n)
            context.extend(accepted)
            if k:
                self.drafter.update(context, n)
            if self._keeps_features:  # row i of the verified input produced accepted[i]
                self.drafter.accept_target_states(self.runner.features[: n + 1], accepted)
        with profile.phase("policy"):
            self._observe(policy, proposed, k, accepted, profile.seconds)
        # Emit n + 1 tokens (1..K+1) for one target pass.
        with profile.phase("detokenize"):
            emission = reply.append(accepted, [Origin.DRAFT] * n + [Origin.TARGET])
        stats.record_step(k, n, draft.forwards if draft else 0, profile.seconds)
        return emission, tuple(tokens[n:])

    def _verification_input(self, last: int, draft: Draft | None) -> torch.Tensor:
        """[1, K+1]: the context's last token, then the draft's tokens, on the device without a wait."""
        if draft is not None and draft.on_device is not None:
            return torch.cat([self._stage.tokens([last]), draft.on_device]).view(1, -1)
        return self._stage.tokens([last, *(draft.tokens if draft is not None else ())]).view(1, -1)

    def _settle(self) -> None:
        """With `settle_phases` on a GPU: waits for the device's queued work (see __init__)."""
        if self.settle_phases and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _propose(self, context: list[int], limit: int, policy: DraftLengthPolicy, profile: Profile) -> _Proposed:
        """The draft for this step, cut to the length the policy chose (None: none), with what the policy needs to
        learn from the step. A drafter can offer two kinds of proposal: a free one (a model-free drafter's, or the
        lookup hybrid's prompt lookup), whose K is chosen after seeing its acceptance class, and a paid one (a
        model's passes), whose K is chosen before it is made. Where it has both, the free one wins when its class is
        expected to yield more tokens per second than running the model. The free proposal is skipped on steps
        where the policy expects it to be useless (DraftLengthPolicy.wants_lookup). The policy's time is its phase;
        the model's passes are timed apart from the rest of the phase (the lookup, which a plain step pays too)."""
        model_s = 0.0
        paid = self.capabilities.uses_model
        look = limit > 0 and policy.wants_lookup()
        lookup = self._free_proposal(context, min(limit, policy.k_max)) if look else None
        with profile.phase("policy"):
            free = lookup is not None and (not paid or policy.free_beats_model(limit, lookup.acceptance_class))
            if free:  # K is at most the proposal's length: with a measured curve, every size checked is measured
                k_wanted = policy.choose(min(limit, lookup.length), lookup.acceptance_class, free=True)
            else:
                k_wanted = policy.choose(limit) if paid else 0
        draft = lookup if free else None
        if not free and k_wanted > 0:
            started = time.perf_counter()
            draft = self.drafter.propose(context, k_wanted)
            self._settle()
            model_s = time.perf_counter() - started
        unused = lookup if lookup is not None and lookup.tokens and (draft is not lookup or k_wanted == 0) else None
        if draft is None or k_wanted == 0:
            return _Proposed(None, free, model_s, unused)
        return _Proposed(draft.cut(k_wanted), free, model_s, unused)

    def _free_proposal(self, context: list[int], k: int) -> Draft | None:
        """Up to k tokens that cost no model pass: a model-free drafter's proposal, a FreeProposer's free one (the
        lookup hybrid's prompt lookup), or None for a drafter whose every proposal runs its model."""
        if not self.capabilities.uses_model:
            return self.drafter.propose(context, k)
        if self._offers_free:
            return self.drafter.free_proposal(context, k)
        return None

    @staticmethod
    def _observe(policy: DraftLengthPolicy, proposed: _Proposed, k: int, accepted: list[int],
                 seconds: dict[str, float]) -> None:
        """Tells the policy what the step cost and yielded: the target pass, the draft model's passes, and the rest
        of the step's own work (everything but the emission, whose cost per token plain decoding pays alike); and,
        for a free proposal left unused, whether its first token is the one the target produced there."""
        draft = proposed.draft
        overhead = sum(seconds.get(phase, 0.0) for phase in ("draft", "accept", "rollback", "policy"))
        policy.observe(k, len(accepted) - 1, verify_s=seconds["verify"] + overhead - proposed.model_s,
                       draft_s=proposed.model_s, acceptance_class=draft.acceptance_class if draft else None,
                       free=proposed.free)
        if proposed.unused is not None:
            policy.observe_shadow(proposed.unused.acceptance_class, proposed.unused.tokens[0] == accepted[0])

    def _checked_prompt(self, prompt_ids: Sequence[int]) -> list[int]:
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise PromptError("the prompt is empty")
        if len(prompt) >= self.context_window:
            raise PromptError(f"the prompt has {len(prompt)} tokens but the model's context window holds "
                              f"{self.context_window}; shorten it")
        return prompt

    def _event(self, emission: Emission, rejected: tuple[int, ...], stats: GenerationStats,
               reply: Reply, seed: int, finished: bool) -> StepEvent:
        result = None
        if finished:
            result = GenerationResult(text=reply.text, token_ids=tuple(reply.token_ids),
                                      origins=tuple(reply.origins), spans=tuple(reply.spans),
                                      finish_reason=reply.finish_reason, stats=stats.copy(), seed=seed,
                                      text_start=reply.text_start)
        return StepEvent(
            token_ids=tuple(emission.token_ids), origins=tuple(emission.origins),
            spans=tuple(emission.spans), text_delta=emission.text_delta, text_offset=emission.text_offset,
            rejected_ids=rejected,
            rejected_text=self.tokenizer.decode(list(rejected), skip_special_tokens=True) if rejected else "",
            stats=stats, wall_s=stats.wall_s, finish_reason=reply.finish_reason if finished else None, result=result,
        )


@dataclass
class _Proposed:
    """What _propose chose: the draft cut to the chosen length (None: a plain step), whether it was the free
    proposal, the draft model's seconds, and a free proposal left unused (its first token is checked against the
    target's, for free)."""

    draft: Draft | None
    free: bool
    model_s: float
    unused: Draft | None


def _verify(logits: torch.Tensor, draft: Draft | None, sampler: Sampler) -> tuple[int, int, list[int]]:
    """(n accepted, the target's next token, the draft's tokens) by the rule of the sampling: greedy or speculative
    sampling. A draft left on the device is verified there and read back with the outcome, in one wait."""
    q = draft.probs if draft is not None else None
    if draft is not None and draft.on_device is not None:
        if sampler.greedy:
            return verify_greedy_on_device(logits, draft.on_device)
        return verify_stochastic_on_device(sampler.probs(logits), draft.on_device, q, sampler)
    tokens = draft.tokens if draft is not None else []
    if sampler.greedy:
        return (*verify_greedy(logits, tokens), tokens)
    return (*verify_stochastic(sampler.probs(logits), tokens, q, sampler), tokens)


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
