"""The drafter interface: cheap proposers of the next K tokens, verified by the target in one pass.

The interface follows transformers' candidate generators: `propose(context, k)` returns a Draft (or None when there
is nothing worth proposing, which makes the step plain decoding), and `update(context, n_accepted)` tells the drafter
how many of its tokens the target accepted, so that it can keep its own state (a draft model's KV cache) in sync
with the accepted text. Each of the three things only some drafters need is a small protocol of one method, and a
drafter needs it exactly when it implements that method (the engine asks isinstance once):

- GenerationState.begin(prompt, sampler, target_vocab_size) before a generation's first proposal (a draft model's
  cache emptied, the sampler it draws from);
- TargetStateReader.accept_target_states(states, tokens) after every target pass (an EAGLE-style head drafts from
  the target's own hidden states);
- FreeProposer.free_proposal(context, k), a proposal that costs no model pass, which the engine weighs against
  running the drafter's model (the lookup hybrid).

What no method says is data, its `Capabilities`: whether proposing runs a model, and whether a TargetStateReader
reads the whole context's states. `check_capabilities` refuses a drafter whose capabilities and protocols disagree.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Protocol, Sequence, runtime_checkable

import torch

from ..decoding.adaptive import PAST_REPLIES, PROMPT, RESUMED, AcceptanceClass
from ..decoding.sampling import Sampler

__all__ = ["PAST_REPLIES", "PROMPT", "RESUMED", "AcceptanceClass", "Capabilities", "Draft", "Drafter", "FreeProposer",
           "GenerationState", "NoDrafter", "TargetStateReader", "check_capabilities", "over_vocabulary"]


@dataclass
class Draft:
    """A proposal: `tokens` x_1..x_K; `probs`, q_i for each of them ([K, vocab] processed distributions, padded to
    the target's vocabulary), or None for a deterministic proposal (a point mass, also what greedy decoding needs);
    `acceptance_class`, the class the draft-length policy learns its acceptance under (adaptive.AcceptanceClass:
    prompt lookup's source and match length; None: the drafter's one class); `forwards`, the draft model's (or
    head's) passes it cost."""

    tokens: list[int]
    probs: torch.Tensor | None = None
    acceptance_class: AcceptanceClass | None = None
    forwards: int = 0
    match_length: int | None = None  # a lookup's: how many tokens of the context's end it matched
    # A draft model on a GPU leaves its tokens there (a 1-D long tensor) and `tokens` empty: the host learns them
    # with the verification's result, in the step's one wait (engine/backends/torch/host_syncs.py).
    on_device: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """K, the number of proposed tokens, wherever they are."""
        return self.on_device.shape[0] if self.on_device is not None else len(self.tokens)

    def cut(self, k: int) -> "Draft":
        """The first k proposed tokens (and their q_i)."""
        if k >= self.length:
            return self
        probs = self.probs[:k] if self.probs is not None else None
        if self.on_device is not None:
            return replace(self, on_device=self.on_device[:k], probs=probs)
        return replace(self, tokens=self.tokens[:k], probs=probs)


@dataclass(frozen=True)
class Capabilities:
    """What the engine must know about a drafter before it drafts, beyond the protocols it implements."""

    # True when proposing costs passes of a draft model (or head), so K is chosen before proposing and those passes
    # are timed. A model-free drafter is asked for as many tokens as could be used, and K is chosen after seeing
    # its proposal's acceptance class.
    uses_model: bool = False
    # True for a TargetStateReader that reads the states of the whole context (an attending head), the prompt's
    # included; otherwise the prefill hands over only its last one.
    reads_context: bool = False


class Drafter(ABC):
    """Proposes tokens for the target to verify: `propose` and `update`, and what else it is in `capabilities`."""

    name: str = "drafter"
    capabilities: Capabilities = Capabilities()

    @abstractmethod
    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        """Up to k tokens that likely follow `context` (prompt + reply so far), or None for no draft."""

    def update(self, context: Sequence[int], n_accepted: int) -> None:
        """After a step that verified this drafter's proposal: `context` is the sequence after verification (the
        old context, the n_accepted tokens and the target's own one). Nothing to do for a stateless drafter."""


@runtime_checkable
class GenerationState(Protocol):
    """A drafter with state per generation (a draft model's cache, the sampler it draws from)."""

    def begin(self, prompt: Sequence[int], sampler: Sampler, target_vocab_size: int) -> None:
        """Called once per generation before the first proposal: `sampler` is the one the target's tokens are drawn
        with (a model drafter drafts with it), `target_vocab_size` the width its q_i must be padded to."""


@runtime_checkable
class TargetStateReader(Protocol):
    """A drafter that reads the target's hidden states (an EAGLE-style head): the engine then keeps the hidden
    states of the newly verified positions and hands them over after every pass."""

    def accept_target_states(self, states: torch.Tensor, tokens: Sequence[int]) -> None:
        """The target's last hidden states [n, hidden] at the newly verified positions: row i is the state that
        produced tokens[i], the last row the one that produced the context's newest token."""


@runtime_checkable
class FreeProposer(Protocol):
    """A drafter with a model that also offers proposals costing no model pass."""

    def free_proposal(self, context: Sequence[int], k: int) -> Draft | None:
        """Up to k tokens that cost no model pass (None: none). The engine drafts them instead of `propose` when
        their acceptance class is expected to yield more tokens per second than running the model."""


def check_capabilities(drafter: Drafter) -> Capabilities:
    """The drafter's capabilities; TypeError where they contradict its protocols (reading the context's target
    states but not a TargetStateReader; free proposals from a drafter whose every proposal is free), which the
    engine would otherwise silently misread."""
    capabilities = drafter.capabilities
    if capabilities.reads_context and not isinstance(drafter, TargetStateReader):
        raise TypeError(f"the {drafter.name} drafter reads the context's target states but no target states")
    if isinstance(drafter, FreeProposer) and not capabilities.uses_model:
        raise TypeError(f"the {drafter.name} drafter offers free proposals but no paid ones: its proposals are free")
    return capabilities


class NoDrafter(Drafter):
    """Plain decoding through the same loop and event stream: the baseline."""

    name = "none"

    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        return None


def over_vocabulary(logits: torch.Tensor, ids: torch.Tensor, size: int) -> torch.Tensor:
    """Logits over the rows `ids` spread over a vocabulary of `size`: -inf (probability 0) everywhere else."""
    full = torch.full((size,), float("-inf"), dtype=logits.dtype, device=logits.device)
    return full.index_copy_(0, ids, logits)
