"""Drafters: cheap proposers of the next K tokens, verified by the target in one pass.

The interface follows transformers' candidate generators: `propose` returns a Draft (or None when there is nothing
worth proposing, which makes the step plain decoding), and `update` tells the drafter how many of its tokens the
target accepted so that it can keep its own state (a draft model's KV cache) in sync with the accepted text.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .cache import cache_argument, new_cache, rollback
from .history import SuffixIndex, backward_agreement
from .lean import LeanLlamaRunner, lean_runner_supported
from .sampling import Sampler


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


class Drafter(ABC):
    name: str = "drafter"
    # True when proposing costs forward passes of a draft model, so K is chosen before proposing. A model-free
    # drafter is asked for as many tokens as could be used, and K is chosen after seeing its confidence.
    uses_model: bool = False
    # True for a drafter that reads the target's last hidden states (an EAGLE-style head): the engine then keeps
    # the hidden states of the newly verified positions and hands them over after every target pass.
    wants_target_features: bool = False
    # True when it reads the states of the whole context (an attending head), the prompt's included; otherwise
    # the prefill hands over only its last one.
    reads_context: bool = False

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


class PromptLookupDrafter(Drafter):
    """Model-free drafting (Saxena 2023): if the last n tokens occurred before, propose what followed them.

    Replies often copy spans of the prompt (editing, summarising, extracting, code) or of themselves, so the
    continuation of the most recent earlier match of the longest suffix n-gram is a good guess, and costs no model.
    The longer the match, the likelier the copy goes on: the match length is reported as the draft's confidence.
    """

    name = "pld"

    def __init__(self, max_ngram: int = 6, min_ngram: int = 1, history: SuffixIndex | None = None):
        """history: also look in the user's past replies (the "history" drafter); the longer match wins, the
        context on a tie."""
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.history = history
        if history is not None:
            self.name = "history"

    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        draft = self._from_context(context, k)
        if self.history is None or k < 1:
            return draft
        found = self.history.match(context, k)
        if found is None or not found.tokens or (draft is not None and draft.confidence >= found.length):
            return draft
        return Draft(tokens=found.tokens, confidence=history_class(found.length), source="history")

    def _from_context(self, context: Sequence[int], k: int) -> Draft | None:
        """The tokens after the latest earlier occurrence of the longest suffix n-gram (max_ngram down to
        min_ngram) that is followed by at least one token."""
        ids = np.asarray(context, dtype=np.int64)
        if len(ids) < 2 or k < 1:
            return None
        # Every earlier occurrence of the final n-gram ends at an earlier copy of the last token: measure, at each
        # such copy, how many tokens back it agrees with the context's end (at most max_ngram). One pass over the
        # context and a few over those copies, rather than comparing every window once per n (a tenth of the time).
        ends = np.flatnonzero(ids[:-1] == ids[-1])
        if len(ends) == 0:
            return None
        tail = ids[::-1][: self.max_ngram]  # the n-gram must end before the last token
        agree = backward_agreement(ids, ends, tail, known=1, limit=min(self.max_ngram, len(ids) - 1))
        n = int(agree.max())
        if n < self.min_ngram:
            return None
        end = int(ends[agree >= n][-1])  # the latest occurrence of the longest match
        return Draft(tokens=ids[end + 1 : end + 1 + k].tolist(), confidence=n)


def history_class(length: int) -> int:
    """The acceptance class of a match of `length` tokens in past replies: exact up to 8, then 12 (9-15) and 16
    (16 or more). A match that long is the same request again far more often than a shared phrase, and its own
    class keeps the phrases' failures (a shared opening, then another answer) from stopping it."""
    return length if length <= 8 else 12 if length < 16 else 16


class ModelDrafter(Drafter):
    """A small causal LM with the target's vocabulary, drafting autoregressively from its own KV cache.

    The cache holds the draft's view of the sequence. After verification, positions past the last token both
    sides agree on are cropped, so the next proposal only feeds the tokens the draft has not seen yet.
    """

    name = "model"
    uses_model = True

    def __init__(self, model: torch.nn.Module, lean: bool | None = None, vocab_ids: torch.Tensor | None = None):
        self.model = model
        self.device = next(model.parameters()).device
        use_lean = lean_runner_supported(model) if lean is None else lean
        self._runner = LeanLlamaRunner(model) if use_lean else TransformersRunner(model)
        # Proposing only from the tokens the target's replies mostly use (the draft folder's proposal vocabulary):
        # for a small draft the output head is most of the work per token (49152 x 192 of the shipped draft's
        # 10.6M weights), and a token outside them is rarely accepted anyway. The lean runner computes only those
        # rows; q is zero outside them, so sampling stays exact.
        self._vocab = vocab_ids.to(self.device) if vocab_ids is not None and use_lean else None
        self._draft_vocab = model.get_output_embeddings().weight.shape[0]
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


def over_vocabulary(logits: torch.Tensor, ids: torch.Tensor, size: int) -> torch.Tensor:
    """Logits over the rows `ids` spread over a vocabulary of `size`: -inf (probability 0) everywhere else."""
    full = torch.full((size,), float("-inf"), dtype=logits.dtype, device=logits.device)
    return full.index_copy_(0, ids, logits)


class HybridDrafter(ModelDrafter):
    """The draft model, and prompt lookup where the text repeats itself.

    Copying (editing, summarising, extracting, code) is where prompt lookup shines and a small model is weakest;
    free-form text is the reverse. Each step the engine weighs a lookup match of length n (its own acceptance rate,
    no drafting cost) against the model (its acceptance rate, plus its cost per token) and takes the better.
    The model's cache simply lags behind during lookup steps and catches up in one pass at its next proposal.
    """

    name = "hybrid"

    def __init__(self, model: torch.nn.Module, lean: bool | None = None, vocab_ids: torch.Tensor | None = None,
                 history: SuffixIndex | None = None):
        super().__init__(model, lean, vocab_ids)
        self._lookup = PromptLookupDrafter(history=history)
        self._model_proposed = False

    def free_proposal(self, context: Sequence[int], k: int) -> Draft | None:
        self._model_proposed = False
        return self._lookup.propose(context, k)

    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        self._model_proposed = True
        return super().propose(context, k)

    def update(self, context: Sequence[int], n_accepted: int) -> None:
        if self._model_proposed:  # after a lookup step the model's cache holds only agreed tokens already
            super().update(context, n_accepted)


class TransformersRunner:
    """Any causal LM through transformers' forward, with a preallocated cache cropped on rejection."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.device = next(model.parameters()).device
        self._cache_argument = cache_argument(model)
        self._cache = None

    def reset(self) -> None:
        self._cache = new_cache(self.model)

    @property
    def length(self) -> int:
        return self._cache.get_seq_length()

    def crop(self, keep: int) -> None:
        rollback(self._cache, keep)

    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        ids = torch.tensor([list(tokens)], device=self.device)
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self._cache_argument: self._cache})
        return out.logits[0, -1]


DRAFTER_KINDS = ("hybrid", "model", "eagle-hybrid", "eagle", "history", "pld", "none")
MODEL_DRAFTERS = ("hybrid", "model")  # the kinds that need a draft model
HEAD_DRAFTERS = ("eagle-hybrid", "eagle")  # the kinds that need a draft head trained for the target
LOOKUP_DRAFTERS = ("hybrid", "eagle-hybrid", "history", "pld")  # the kinds whose lookup can also read history
DRAFTER_LABELS = {"hybrid": "draft model + prompt lookup", "model": "draft model",
                  "eagle-hybrid": "draft head + prompt lookup", "eagle": "draft head (EAGLE)",
                  "history": "prompt lookup + past replies", "pld": "prompt lookup", "none": "plain decoding"}


def make_drafter(kind: str, draft_model: torch.nn.Module | None = None, head: torch.nn.Module | None = None,
                 target: torch.nn.Module | None = None, draft_vocab: torch.Tensor | None = None,
                 history: SuffixIndex | None = None) -> Drafter:
    """A drafter of `kind`; the model kinds need `draft_model` (and may propose from `draft_vocab` only), the head
    kinds a `head` and its `target`, the history kind a `history` index. The other lookup kinds read `history`
    too when given one (the app's "draft from past replies" setting)."""
    if kind == "none":
        return NoDrafter()
    if kind == "history" and history is None:
        raise ValueError("the history drafter needs an index of past replies")
    if kind in ("pld", "history"):
        return PromptLookupDrafter(history=history)
    if kind in MODEL_DRAFTERS:
        if draft_model is None:
            raise ValueError(f"the {kind} drafter needs a draft model")
        if kind == "model":
            return ModelDrafter(draft_model, vocab_ids=draft_vocab)
        return HybridDrafter(draft_model, vocab_ids=draft_vocab, history=history)
    if kind in HEAD_DRAFTERS:
        if head is None or target is None:
            raise ValueError(f"the {kind} drafter needs a draft head and its target")
        from .eagle import EagleDrafter, EagleHybridDrafter  # eagle.py builds on this module

        return EagleDrafter(head, target) if kind == "eagle" else EagleHybridDrafter(head, target, history=history)
    raise ValueError(f"unknown drafter {kind!r} (choose one of {', '.join(DRAFTER_KINDS)})")
