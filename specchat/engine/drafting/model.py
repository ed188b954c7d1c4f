"""The draft-model drafter: a small causal LM with the target's vocabulary, drafting from its own KV cache, on
llama.cpp for a GGUF draft, else the lean Llama forward where it applies and transformers' forward otherwise
(drafting/backends.py); and DraftModelBase, the draft model's backend setup it shares with the universal drafter."""

from __future__ import annotations

from typing import Sequence

import torch

from ..backends.draft_backends import TransformersDraftForward, can_cut_output_rows, draft_backend
from ..decoding.sampling import Sampler
from .base import Capabilities, Draft, Drafter, over_vocabulary

__all__ = ["DraftModelBase", "ModelDrafter", "TransformersDraftForward"]


class DraftModelBase(Drafter):
    """What every drafter with a draft model shares (ModelDrafter here, UniversalDrafter in universal.py): the
    draft's backend (drafting/backends.py), its proposal vocabulary, and the count of its forwards."""

    capabilities = Capabilities(uses_model=True)

    def __init__(self, model, lean: bool | None = None, vocab_ids: torch.Tensor | None = None,
                 static: bool | None = None, compile_backend: str | None = "auto"):
        """`model`: a torch causal LM, or a LlamaCppModel for a GGUF draft on llama.cpp; `lean`: whether to use the
        lean Llama forward (None: where it applies); `vocab_ids`: the draft folder's proposal vocabulary (draft ids);
        `static`: a torch draft over a static cache, its tokens kept on the device (None: on a GPU), its steps
        compiled with `compile_backend` ("auto": inductor on a GPU, none elsewhere; drafting/backends.py).

        Proposing only from the tokens the target's replies mostly use: for a small draft the output head is most
        of the work per token (49152 x 192 of the shipped draft's 10.6M weights), and a token outside them is
        rarely accepted anyway. A backend that can cut its output head computes only those rows (then self._vocab
        holds them, and row i of the logits is token self._vocab[i]); other backends ignore the vocabulary."""
        self.model = model
        self._backend = draft_backend(model, lean, static, compile_backend)
        self.device = self._backend.device
        use_lean = can_cut_output_rows(self._backend)
        self._vocab = vocab_ids.to(self.device) if vocab_ids is not None and use_lean else None
        if self._vocab is not None:
            self._backend.keep_output_rows(self._vocab)
        self._forwards = 0  # the draft's passes since the generation began (Draft.forwards: a proposal's share)
        self._on_device = getattr(self._backend, "device_resident", False)  # drafts stay on the device

    def begin(self, prompt: Sequence[int], sampler: Sampler, target_vocab_size: int) -> None:
        """A new generation (GenerationState): the draft's cache emptied and its forwards counted from zero."""
        self._backend.reset()
        self._forwards = 0

    def _forward(self, tokens: Sequence[int]) -> torch.Tensor:
        """Feeds `tokens` to the draft after its cache; returns the logits for the token after them."""
        self._forwards += 1
        return self._backend.forward(tokens)

    def _argmax_token(self, logits: torch.Tensor) -> int:
        """The draft id of the most likely token (the logits' rows are the proposal vocabulary's where it is cut)."""
        index = int(torch.argmax(logits))
        return int(self._vocab[index]) if self._vocab is not None else index


class ModelDrafter(DraftModelBase):
    """A small causal LM with the target's vocabulary, drafting autoregressively from its own KV cache.

    The cache holds the draft's view of the sequence. After verification, positions past the last token both
    sides agree on are cropped, so the next proposal only feeds the tokens the draft has not seen yet. q is zero
    outside the proposal vocabulary (DraftModelBase), so sampling stays exact.
    """

    name = "model"

    def __init__(self, model, lean: bool | None = None, vocab_ids: torch.Tensor | None = None,
                 static: bool | None = None, compile_backend: str | None = "auto"):
        """`model`: a torch causal LM, or a LlamaCppModel for a GGUF draft on llama.cpp (see DraftModelBase)."""
        super().__init__(model, lean, vocab_ids, static, compile_backend)
        self._draft_vocab = self._backend.vocab_rows
        self._seen = 0  # context tokens in the cache
        self._last_context_len = 0
        self._last_k = 0

    def begin(self, prompt: Sequence[int], sampler: Sampler, target_vocab_size: int) -> None:
        super().begin(prompt, sampler, target_vocab_size)
        self._seen = 0
        self._sampler = sampler
        self._target_vocab = target_vocab_size
        if self._on_device and prompt:  # the prompt's pass now, beside the target's, not inside the first step
            with torch.inference_mode():
                self._forward(prompt)
            self._seen = len(prompt)

    @torch.inference_mode()
    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        if self._on_device:
            return self._propose_on_device(context, k)
        forwards_before = self._forwards
        logits = self._forward(context[self._seen :])
        tokens: list[int] = []
        dists: list[torch.Tensor] = []
        for i in range(k):
            if self._sampler.greedy:
                token = self._argmax_token(logits)
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
        return Draft(tokens=tokens, probs=self._stack_padded(dists) if dists else None,
                     forwards=self._forwards - forwards_before)

    def _propose_on_device(self, context: Sequence[int], k: int) -> Draft:
        """propose() for a draft whose backend keeps its tokens on the device: each drafted token (the argmax, or a
        draw) is fed back as the device tensor it is, so K passes are queued without a wait, and the Draft carries
        them `on_device` for the target to verify there."""
        forwards_before = self._forwards
        logits = self._forward(context[self._seen :])
        tokens: list[torch.Tensor] = []
        dists: list[torch.Tensor] = []
        for i in range(k):
            if self._sampler.greedy:
                index = torch.argmax(logits).view(1)
                token = self._vocab[index] if self._vocab is not None else index
            else:
                q = self._sampler.probs(logits)
                token = self._sampler.sample(q.view(1, -1))
                dists.append(q)
            tokens.append(token)
            if i < k - 1:
                self._forwards += 1
                logits = self._backend.forward_ids(token)
        self._last_context_len = len(context)
        self._last_k = k
        self._seen = len(context) + k - 1
        return Draft(tokens=[], on_device=torch.cat(tokens), probs=self._stack_padded(dists) if dists else None,
                     forwards=self._forwards - forwards_before)

    def update(self, context: Sequence[int], n_accepted: int) -> None:
        # The cache holds context + draft[:k-1]; of those draft tokens only the accepted ones are still true.
        agreed = self._last_context_len + min(n_accepted, self._last_k - 1)
        self._backend.crop(agreed)
        self._seen = agreed

    def _stack_padded(self, dists: list[torch.Tensor]) -> torch.Tensor:
        """[K, target vocab]: a draft with a smaller (unpadded) embedding puts no mass on the extra ids."""
        q = torch.stack(dists)
        missing = self._target_vocab - q.shape[-1]
        if missing > 0:
            q = torch.nn.functional.pad(q, (0, missing))
        return q[:, : self._target_vocab]
