"""The draft-model drafter: a small causal LM with the target's vocabulary, drafting from its own KV cache, on
llama.cpp for a GGUF draft, else the lean Llama runner where it applies and transformers' forward otherwise
(drafting/backends.py)."""

from __future__ import annotations

from typing import Sequence

import torch

from ..sampling import Sampler
from .backends import TransformersRunner, can_cut_output_rows, draft_runner
from .base import Capabilities, Draft, Drafter, over_vocabulary

__all__ = ["ModelDrafter", "TransformersRunner"]


class ModelDrafter(Drafter):
    """A small causal LM with the target's vocabulary, drafting autoregressively from its own KV cache.

    The cache holds the draft's view of the sequence. After verification, positions past the last token both
    sides agree on are cropped, so the next proposal only feeds the tokens the draft has not seen yet.
    """

    name = "model"
    capabilities = Capabilities(uses_model=True)

    def __init__(self, model, lean: bool | None = None, vocab_ids: torch.Tensor | None = None):
        """`model`: a torch causal LM, or a LlamaCppModel for a GGUF draft on llama.cpp."""
        self.model = model
        self._runner = draft_runner(model, lean)
        self.device = self._runner.device
        use_lean = can_cut_output_rows(self._runner)
        # Proposing only from the tokens the target's replies mostly use (the draft folder's proposal vocabulary):
        # for a small draft the output head is most of the work per token (49152 x 192 of the shipped draft's
        # 10.6M weights), and a token outside them is rarely accepted anyway. The lean runner computes only those
        # rows; q is zero outside them, so sampling stays exact.
        self._vocab = vocab_ids.to(self.device) if vocab_ids is not None and use_lean else None
        self._draft_vocab = self._runner.vocab_rows
        if self._vocab is not None:
            self._runner.keep_output_rows(self._vocab)
        self._seen = 0  # context tokens in the cache
        self._last_context_len = 0
        self._last_k = 0
        self._forwards = 0

    def begin(self, prompt: Sequence[int], sampler: Sampler, target_vocab_size: int) -> None:
        self._runner.reset()
        self._seen = 0
        self._forwards = 0
        self._sampler = sampler
        self._target_vocab = target_vocab_size

    @property
    def forward_count(self) -> int:
        return self._forwards

    @property
    def cached_tokens(self) -> int:
        return self._runner.length

    @torch.inference_mode()
    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        logits = self._forward(context[self._seen :])
        tokens: list[int] = []
        dists: list[torch.Tensor] = []
        for i in range(k):
            if self._sampler.greedy:
                index = int(torch.argmax(logits))
                token = int(self._vocab[index]) if self._vocab is not None else index
            else:
                q = self._sampler.probs(logits if self._vocab is None
                                        else over_vocabulary(logits, self._vocab, self._draft_vocab))
                token = int(self._sampler.sample(q))
                dists.append(q)
            tokens.append(token)
            if i < k - 1:  # the last proposal need not be fed: its successor is never drafted
                logits = self._forward([token])
        self._last_context_len = len(context)
        self._last_k = k
        self._seen = len(context) + k - 1
        return Draft(tokens=tokens, probs=self._stack_padded(dists) if dists else None)

    def update(self, context: Sequence[int], n_accepted: int) -> None:
        # The cache holds context + draft[:k-1]; of those draft tokens only the accepted ones are still true.
        agreed = self._last_context_len + min(n_accepted, self._last_k - 1)
        self._runner.crop(agreed)
        self._seen = agreed

    def _forward(self, tokens: Sequence[int]) -> torch.Tensor:
        self._forwards += 1
        return self._runner.forward(tokens)

    def _stack_padded(self, dists: list[torch.Tensor]) -> torch.Tensor:
        """[K, target vocab]: a draft with a smaller (unpadded) embedding puts no mass on the extra ids."""
        q = torch.stack(dists)
        missing = self._target_vocab - q.shape[-1]
        if missing > 0:
            q = torch.nn.functional.pad(q, (0, missing))
        return q[:, : self._target_vocab]
