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
from .cache import cache_argument, new_cache, new_static_cache, rollback
from .head import tuned_head_for
from .drafters import Drafter, NoDrafter
from .lean import LeanCache, LeanLlama, lean_runner_supported
from .errors import PromptError
from .events import GenerationResult, GenerationStats, Origin, StepEvent
from .reply import Emission, Reply
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

    def __init__(self, target: torch.nn.Module, tokenizer, drafter: Drafter | None = None,
                 eos_token_ids: Sequence[int] | None = None, static_cache: bool | None = None,
                 compile_steps: bool | None = None, tuned_head: bool | None = None, lean: bool | None = None,
                 packed_weights: bool = True):
        """static_cache / compile_steps: the GPU fast path (None = on for CUDA). A static KV cache keeps every
        buffer at a fixed address; the verification forward (1..K+1 tokens) is then compiled with CUDA graphs,
        one graph per input length, while the prefill (any prompt length) stays eager. tuned_head (None = where it
        applies, CPU float32 Llama-like models): steps compute logits with engine/head.py's faster layout.
        lean (None = where it applies: plain Llama targets off the GPU fast path): every pass runs engine/lean.py's
        forward over its own KV cache instead of transformers' (the same numbers, less bookkeeping per pass).
        packed_weights: the lean forward's verification passes (4-17 tokens) multiply by MKL-packed weights where
        MKL has them (engine/packed.py; float32 rounding differs from the one-token steps in the last bits)."""
        self.target = target
        self.tokenizer = tokenizer
        self.drafter = drafter or NoDrafter()
        self.device = next(target.parameters()).device
        self.eos_token_ids = set(eos_token_ids) if eos_token_ids is not None else default_eos_ids(target, tokenizer)
        self.context_window = getattr(target.config, "max_position_embeddings", None) or 1 << 30
        self.vocab_size = target.get_output_embeddings().weight.shape[0]
        self._cache_argument = cache_argument(target)
        self.step_costs = StepCosts()  # measured per engine, reused by every generation
        on_gpu = self.device.type == "cuda"
        self.static_cache = on_gpu if static_cache is None else static_cache
        self._step_forward = self._plain_forward
        self._head = tuned_head_for(target) if tuned_head is None or tuned_head else None
        # A drafter reading the target's hidden states needs them from every pass, the prefill included.
        self._keeps_features = self.drafter.wants_target_features
        self._reads_context = self._keeps_features and self.drafter.reads_context
        self._features: torch.Tensor | None = None  # [keep, hidden] of the latest pass, when kept
        self._prefill_forward = self._plain_forward
        compiled = compile_steps if compile_steps is not None else (on_gpu and self.static_cache)
        if lean is None:
            lean = not self.static_cache and not compiled and lean_runner_supported(target)
        self._lean = LeanLlama(target, packed=packed_weights) if lean else None
        if self._lean is not None:
            if self.static_cache or compiled:
                raise ValueError("the lean forward keeps its own cache; the static cache and compiled steps are "
                                 "transformers' forward")
            self._output_head = self._head or target.get_output_embeddings()
            self._step_forward = self._prefill_forward = self._forward_lean
        elif self._head is not None or self._keeps_features:
            self._decoder = target.get_decoder()
            self._output_head = self._head or target.get_output_embeddings()
            self._step_forward = self._forward_through_decoder
            if self._keeps_features:
                self._prefill_forward = self._forward_through_decoder
        if compiled:
            if not self.static_cache:
                raise ValueError("compiled steps need the static cache (a growing cache recompiles every step)")
            self._step_forward = compile_forward(target, self._keep_features if self._keeps_features else None)

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
        policy = DraftLengthPolicy(k=config.k, k_max=config.k_max, adaptive=config.adaptive_k, costs=costs)
        started = time.perf_counter()

        cache = self._new_cache(len(prompt), reply.max_new_tokens, config.k_max)
        logits = self._forward(torch.tensor([prompt], device=self.device), cache, keep=1, prefill=True,
                               hidden_rows=len(prompt) if self._reads_context else 1)[0]
        first = sampler.next_token(logits)
        stats.target_passes = 1
        stats.prefill_s = time.perf_counter() - started
        self.drafter.begin(prompt, sampler, self.vocab_size)
        if self._keeps_features:  # row i produced token i + 1 of the context
            self.drafter.accept_target_states(self._features, (prompt[1:] + [first])[-len(self._features):])
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
        logits = self._forward(torch.tensor([[context[-1], *draft_tokens]], device=self.device), cache, keep=k + 1)
        verify_s = clock.lap()  # on a GPU this includes the wait for the kernels: the rule below needs the logits
        if sampler.greedy:
            n, next_token = verify_greedy(logits, draft_tokens)
        else:
            q = draft.probs[:k] if draft is not None and draft.probs is not None else None
            n, next_token = verify_stochastic(sampler.probs(logits), draft_tokens, q, sampler)
        accept_s = clock.lap()

        # Keep [.. last token, x_1..x_n]; the next input is next_token. The cache holds len(context) + k positions.
        rollback(cache, len(context) + n, length=len(context) + k)
        accepted = draft_tokens[:n] + [next_token]
        context.extend(accepted)
        if k:
            self.drafter.update(context, n)
        if self._keeps_features:  # row i of the verified input produced accepted[i]
            self.drafter.accept_target_states(self._features[: n + 1], accepted)
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
            if draft is not None and policy.free_beats_model(limit, draft.confidence):
                free = True
                k_wanted = policy.choose(limit, draft.confidence, free=True)
            else:
                k_wanted = policy.choose(limit)
                draft = None
            policy_s += time.perf_counter() - t_policy
            if not free:
                draft = self.drafter.propose(context, k_wanted) if k_wanted > 0 else None
        else:
            draft = self.drafter.propose(context, min(limit, policy.k_max)) if limit > 0 else None
            t_policy = time.perf_counter()
            k_wanted = policy.choose(limit, draft.confidence) if draft is not None else 0
            policy_s += time.perf_counter() - t_policy
        if draft is None or k_wanted == 0:
            return None, free, policy_s
        return _Proposal(draft.tokens[:k_wanted], draft.probs, draft.confidence,
                         self.drafter.forward_count - forwards_before), free, policy_s

    def new_cache(self, tokens: int):
        """A KV cache with room for `tokens` positions, of the kind this engine's passes use (for measurements)."""
        return self._new_cache(tokens, 0, 0)

    def forward(self, input_ids: torch.Tensor, cache, keep: int = 1, prefill: bool = False) -> torch.Tensor:
        """One target pass as the engine runs it (its forward path and output head): logits [keep, vocab]."""
        return self._forward(input_ids, cache, keep, prefill)

    def _new_cache(self, prompt_tokens: int, max_new_tokens: int, k_max: int):
        if self._lean is not None:  # room for the whole generation at once: it never grows
            return self._lean.new_cache(prompt_tokens + max_new_tokens + k_max + 1)
        if not self.static_cache:
            return new_cache(self.target)
        # Room for the prompt, the reply and one step's drafts beyond it (rejected positions are written, then
        # rolled back), rounded up so that replies of similar length share compiled graphs' cache shapes.
        needed = prompt_tokens + max_new_tokens + k_max + 1
        return new_static_cache(self.target, min(-(-needed // 256) * 256, self.context_window + k_max + 1))

    def _forward(self, input_ids: torch.Tensor, cache, keep: int, prefill: bool = False,
                 hidden_rows: int = 0) -> torch.Tensor:
        """Logits [keep, vocab] for the last `keep` input positions; the cache grows by the input length. A prefill
        for a drafter that reads the context keeps the last `hidden_rows` hidden states (only its prefill forward,
        the decoder's or the lean one, takes the argument)."""
        if prefill and hidden_rows > keep:
            return self._prefill_forward(input_ids, cache, keep, hidden_rows)
        forward = self._prefill_forward if prefill else self._step_forward
        return forward(input_ids, cache, keep)

    def _forward_through_decoder(self, input_ids: torch.Tensor, cache, keep: int, hidden_rows: int = 0) -> torch.Tensor:
        """The decoder, then the output head on the last `keep` hidden states (kept when the drafter reads them);
        the head is the tuned one where it applies."""
        out = self._decoder(input_ids=input_ids, use_cache=True, **{self._cache_argument: cache})
        return self._logits(out.last_hidden_state[0, -max(keep, hidden_rows):], keep)

    def _forward_lean(self, input_ids: torch.Tensor, cache: LeanCache, keep: int, hidden_rows: int = 0) -> torch.Tensor:
        return self._logits(self._lean.hidden_states(input_ids[0], cache, max(keep, hidden_rows)), keep)

    def _logits(self, hidden: torch.Tensor, keep: int) -> torch.Tensor:
        """The output head on the last `keep` hidden states; all of them are kept first when the drafter reads
        them."""
        if self._keeps_features:
            self._keep_features(hidden)
        return self._output_head(hidden[hidden.shape[0] - keep:])

    def _keep_features(self, hidden: torch.Tensor) -> None:
        self._features = hidden

    def _plain_forward(self, input_ids: torch.Tensor, cache, keep: int) -> torch.Tensor:
        out = self.target(input_ids=input_ids, use_cache=True, logits_to_keep=keep, **{self._cache_argument: cache})
        return out.logits[0]

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
    confidence: int | None
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


def compile_forward(model: torch.nn.Module, keep_features: Callable[[torch.Tensor], None] | None = None):
    """The target's step forward compiled with CUDA graphs ("reduce-overhead"): input lengths 1..K+1 each get a
    graph, replayed without per-kernel launch costs. Needs a static cache (fixed buffer addresses). keep_features:
    the decoder is compiled instead, its last hidden states (copied) go to this callback, and the output head runs
    eagerly."""
    argument = cache_argument(model)
    if keep_features is not None:
        decoder, head = model.get_decoder(), model.get_output_embeddings()
        compiled_decoder = torch.compile(decoder.forward, mode="reduce-overhead", fullgraph=False, dynamic=False)

        def forward_keeping_features(input_ids: torch.Tensor, cache, keep: int) -> torch.Tensor:
            out = compiled_decoder(input_ids=input_ids, use_cache=True, **{argument: cache})
            hidden = out.last_hidden_state[0, -keep:].clone()  # graph outputs are overwritten by the next replay
            keep_features(hidden)
            return head(hidden)

        return forward_keeping_features
    compiled = torch.compile(model.forward, mode="reduce-overhead", fullgraph=False, dynamic=False)

    def forward(input_ids: torch.Tensor, cache, keep: int) -> torch.Tensor:
        out = compiled(input_ids=input_ids, use_cache=True, logits_to_keep=keep, **{argument: cache})
        return out.logits[0].clone()  # graph outputs are overwritten by the next replay

    return forward


def default_eos_ids(model: torch.nn.Module, tokenizer) -> set[int]:
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
