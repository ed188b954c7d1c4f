"""The EAGLE drafter: drafting with a draft head (engine/drafting/eagle_network.py) from the target's own hidden states.

A stateless head keeps the target's last hidden state; an attending head feeds the states of every verified
position through its attention block and keeps them in its own KV cache, cropping its drafted positions off before
the next verified ones are added. The head proposes from the target's output rows of its kept tokens only.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from ..backends.torch.lean import LeanCache
from ..decoding.sampling import Sampler
from .base import Capabilities, Draft, Drafter, over_vocabulary
from .eagle_network import EagleHead


class EagleDrafter(Drafter):
    """Drafts with an EagleHead from the target's hidden states.

    The engine hands over the states of the newly verified positions after every target pass (TargetStateReader's
    `accept_target_states`); a stateless head keeps the last one, an attending head queues them and feeds them
    through its attention block (one batched pass) when it next drafts, so a step drafted by prompt lookup costs the
    head nothing. A proposal of k tokens costs k passes of the head, each much smaller than a target pass but not
    free: the draft-length policy times them and weighs them against what the drafts save.
    """

    name = "eagle"

    def __init__(self, head: EagleHead, target: nn.Module):
        self.head = head
        self.capabilities = Capabilities(uses_model=True, reads_context=head.shape.attends)
        self.embeddings = target.get_input_embeddings().weight
        # The kept rows of the target's output head, contiguous: one small matrix product per drafted token.
        output = target.get_output_embeddings()
        self.output_rows = output.weight.detach()[head.vocab_ids].contiguous()
        self.output_bias = output.bias.detach()[head.vocab_ids] if output.bias is not None else None
        self._feature: torch.Tensor | None = None
        self._forwards = 0  # the head's passes since the generation began (Draft.forwards: a proposal's share)
        self._cache: LeanCache | None = None
        self._verified: list[tuple[torch.Tensor, Sequence[int]]] = []  # states not yet fed to the attention block
        self._verified_length = 0  # cached positions computed from the target's own states

    def begin(self, prompt: Sequence[int], sampler: Sampler, target_vocab_size: int) -> None:
        """A new generation (GenerationState): no state kept yet; an attending head's cache sized for the prompt."""
        self._sampler = sampler
        self._target_vocab = target_vocab_size
        self._feature = None
        self._forwards = 0
        self._verified = []
        self._verified_length = 0
        if self.capabilities.reads_context:
            self._cache = self.head.new_cache(len(prompt) + 256)

    def accept_target_states(self, states: torch.Tensor, tokens: Sequence[int]) -> None:
        """The target's states at the newly verified positions (TargetStateReader): a stateless head keeps the last
        one, an attending head queues them all for its next proposal."""
        if self.capabilities.reads_context:
            self._verified.append((states, list(tokens)))
        else:
            self._feature = states[-1]

    @torch.inference_mode()
    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        forwards_before = self._forwards
        feature = self._first_predicted_state(context)
        if feature is None:
            return None
        tokens: list[int] = []
        dists: list[torch.Tensor] = []
        for i in range(k):
            if i:
                feature = self._next_state(feature, tokens[-1])
            logits = nn.functional.linear(feature[0], self.output_rows, self.output_bias)
            if self._sampler.greedy:
                token = int(self.head.vocab_ids[int(torch.argmax(logits))])
            else:
                # -inf outside the head's tokens: q is a proper distribution and the verification rule stays exact
                q = self._sampler.probs(over_vocabulary(logits, self.head.vocab_ids, self._target_vocab))
                token = int(self._sampler.sample(q))
                dists.append(q)
            tokens.append(token)
        return Draft(tokens=tokens, probs=torch.stack(dists) if dists else None,
                     forwards=self._forwards - forwards_before)

    def _first_predicted_state(self, context: Sequence[int]) -> torch.Tensor | None:
        """f^ for the position after the context ([1, hidden]). An attending head first drops the drafted positions
        of its previous proposal and adds the verified ones, in one pass whose last row is that state."""
        if not self.capabilities.reads_context:
            if self._feature is None:
                return None
            self._forwards += 1
            return self.head(self._feature.unsqueeze(0), self.embeddings[context[-1]].unsqueeze(0))
        if not self._verified:
            return None
        states = torch.cat([s for s, _ in self._verified])
        tokens = [t for _, chunk in self._verified for t in chunk]
        self._verified = []
        self._cache.crop(self._verified_length)
        predicted = self.head.extend(states, self.embeddings[tokens], self._cache, last_only=True)
        self._verified_length = self._cache.length
        self._forwards += 1
        return predicted

    def _next_state(self, feature: torch.Tensor, token: int) -> torch.Tensor:
        self._forwards += 1
        embedding = self.embeddings[token].unsqueeze(0)
        if self.capabilities.reads_context:
            return self.head.extend(feature, embedding, self._cache)
        return self.head(feature, embedding)
