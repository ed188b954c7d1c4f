"""The drafter interface: cheap proposers of the next K tokens, verified by the target in one pass.

The interface follows transformers' candidate generators: `propose` returns a Draft (or None when there is nothing
worth proposing, which makes the step plain decoding), and `update` tells the drafter how many of its tokens the
target accepted so that it can keep its own state (a draft model's KV cache) in sync with the accepted text.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

import torch

from ..sampling import Sampler


@dataclass
class Draft:
    tokens: list[int]
    # q_i for each proposed token ([K, vocab] processed distributions, padded to the target's vocabulary),
    # or None for a deterministic proposal (point mass), which is also what greedy decoding needs.
    probs: torch.Tensor | None = None
    # A class of proposals with similar acceptance (prompt lookup: the matched n-gram length), so that the draft
    # length policy can learn each class's acceptance rate separately. None: one class.
    confidence: int | None = None
    # Where a model-free proposal came from: "context" (prompt lookup) or "history" (the user's past replies,
    # engine/history.py). Each source has its own acceptance classes.
    source: str = "context"

    @property
    def acceptance_class(self) -> int | tuple[str, int] | None:
        """The key the draft-length policy keeps this proposal's acceptance under."""
        return self.confidence if self.source == "context" else (self.source, self.confidence)


@dataclass(frozen=True)
class Capabilities:
    """What the engine must know about a drafter before it drafts."""

    # True when proposing costs forward passes of a draft model, so K is chosen before proposing. A model-free
    # drafter is asked for as many tokens as could be used, and K is chosen after seeing its confidence.
    uses_model: bool = False
    # True for a drafter that reads the target's last hidden states (an EAGLE-style head): the engine then keeps
    # the hidden states of the newly verified positions and hands them over after every target pass.
    wants_target_features: bool = False
    # True when it reads the states of the whole context (an attending head), the prompt's included; otherwise
    # the prefill hands over only its last one.
    reads_context: bool = False


class Drafter(ABC):
    name: str = "drafter"
    capabilities: Capabilities = Capabilities()

    @property
    def uses_model(self) -> bool:
        return self.capabilities.uses_model

    @property
    def wants_target_features(self) -> bool:
        return self.capabilities.wants_target_features

    @property
    def reads_context(self) -> bool:
        return self.capabilities.reads_context

    def begin(self, prompt: Sequence[int], sampler: Sampler, target_vocab_size: int) -> None:
        """Called once per generation before the first proposal."""

    @abstractmethod
    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        """Up to k tokens that likely follow `context` (prompt + reply so far), or None for no draft."""

    def update(self, context: Sequence[int], n_accepted: int) -> None:
        """`context` is the sequence after verification: the old context, n accepted tokens and the target's one."""

    def accept_target_states(self, states: torch.Tensor, tokens: Sequence[int]) -> None:
        """The target's last hidden states [n, hidden] at the newly verified positions: row i is the state that
        produced tokens[i], the last row the one that produced the context's newest token."""

    def free_proposal(self, context: Sequence[int], k: int) -> Draft | None:
        """For a drafter with a model: a proposal that costs no model pass (None: none). The engine uses it instead
        of `propose` when its class of proposals is expected to yield more tokens per second."""
        return None

    @property
    def forward_count(self) -> int:
        return 0


class NoDrafter(Drafter):
    """Plain decoding through the same loop and event stream: the baseline."""

    name = "none"

    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        return None


def over_vocabulary(logits: torch.Tensor, ids: torch.Tensor, size: int) -> torch.Tensor:
    """Logits over the rows `ids` spread over a vocabulary of `size`: -inf (probability 0) everywhere else."""
    full = torch.full((size,), float("-inf"), dtype=logits.dtype, device=logits.device)
    return full.index_copy_(0, ids, logits)
