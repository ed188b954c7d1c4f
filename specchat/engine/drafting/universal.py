"""The universal drafter: any draft model for any target, whatever their tokenizers, by going through text.

As transformers' universal assisted generation (AssistedCandidateGeneratorDifferentTokenizers) and the string-level
exact match of Timor et al. (2025, "Accelerating LLM inference with lossless speculative decoding algorithms for
heterogeneous vocabularies"): the target's context is decoded to text and re-tokenized for the draft (only a window
at its end each step: retokenize.DraftView), the draft proposes greedily in its own vocabulary, and its text is
encoded with the target's tokenizer into the proposal the target verifies. The target checks every token by the
engine's usual rule, so the output is the target's own whatever the draft proposes.

Sampling. The engine's rule needs q(x), the probability that the drafter proposes x, in the target's vocabulary.
Through text there is none to give: a target token can come from many draft sequences. But the proposal here is a
deterministic function of the context (greedy drafting, then re-tokenizing), i.e. q is a point mass on the proposed
x, which the engine already handles for prompt lookup (Draft.probs None, sampling.verify_stochastic):

    accept x with probability min(1, p(x) / q(x)) = p(x)
    on rejection draw from norm(max(p - q, 0)) = p with x removed, renormalised: p(y) / (1 - p(x)) for y != x

    P(next = x) = p(x)
    P(next = y) = (1 - p(x)) * p(y) / (1 - p(x)) = p(y)                        for y != x

so every token is distributed exactly as under the target alone, position after position (each is checked given
the accepted ones before it, and the proposal never reads the verifier's random numbers: drafting is greedy and
draws none). Compared with a draft that supplies q, a point mass accepts with p(x) rather than min(1, p(x)/q(x)):
fewer acceptances when the target is unsure, never a wrong distribution.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..decoding.sampling import Sampler
from .base import Draft
from .model import DraftModelBase
from .retokenize import CONTEXT_CHARS, CONTEXT_TOKENS, REPLACEMENT, DraftView, PrefixIndex, TextCodec

MAX_HEALED = 3  # draft tokens at most written again at the end of the context (token healing)


class UniversalDrafter(DraftModelBase):
    """A draft model with its own tokenizer, drafting for a target with another through text."""

    name = "universal"

    def __init__(self, model, target_tokenizer, draft_tokenizer, lean: bool | None = None,
                 vocab_ids: torch.Tensor | None = None, lookbehind: int = 6):
        """`model`: a torch causal LM, or a LlamaCppModel for a GGUF draft on llama.cpp; `vocab_ids`: the draft
        folder's proposal vocabulary in draft ids (model.DraftModelBase); `lookbehind`: retokenize.DraftView's."""
        super().__init__(model, lean, vocab_ids)
        self._row_of = None  # draft id -> its row in the logits (-1: not proposed)
        if self._vocab is not None:
            rows = self._backend.vocab_rows
            self._row_of = torch.full((rows,), -1, dtype=torch.long, device=self.device)
            self._row_of[self._vocab] = torch.arange(len(self._vocab), device=self.device)
        self._target_codec, self._draft_codec = TextCodec(target_tokenizer), TextCodec(draft_tokenizer)
        self._view = DraftView(self._target_codec, self._draft_codec, lookbehind)
        self._stops = _draft_stop_ids(self._backend.stop_ids, draft_tokenizer)
        self._special_to_target = _shared_special_tokens(draft_tokenizer, target_tokenizer, self._stops)
        self._target_prefixes, self._draft_prefixes = PrefixIndex(target_tokenizer), PrefixIndex(draft_tokenizer)
        self._window = self._backend.window
        self._cached: list[int] = []  # the draft ids in the backend's cache

    def begin(self, prompt: Sequence[int], sampler: Sampler, target_vocab_size: int) -> None:
        super().begin(prompt, sampler, target_vocab_size)
        self._view.reset()
        self._cached = []

    @torch.inference_mode()
    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        """Up to k target tokens: k + 1 draft tokens drafted greedily (one more, because the last target token of
        their text is dropped when it may be incomplete), their text re-tokenized for the target.

        Token healing: the context's text often ends inside what the draft writes as one token (the target wrote
        " o" + "ver" where the draft writes "▁over": at " o" the draft's own tokens are "▁" + "o", a split it
        never saw in training, and it drafts poorly after it). The last draft tokens whose spelling some token
        extends are then not fed; the draft writes that text again, each token constrained to go on with what
        remains of it, and the healed text is cut off the proposal."""
        if k < 1:
            return None
        forwards_before = self._forwards
        changed = self._view.sync(context)
        draft_ids = self._view.draft_ids
        healed = self._tokens_to_heal(draft_ids)
        fed = len(draft_ids) - healed
        n_draft = k + 1 + (healed > 0)
        if fed < 1 or fed + n_draft > self._window:
            return None
        remaining = "".join(self._draft_prefixes.spelling(t) for t in draft_ids[fed:])  # to write again
        logits = self._catch_up(draft_ids, fed, changed)
        proposal: list[int] = []
        stop = None
        for i in range(n_draft):
            token = self._greedy(logits, self._draft_prefixes.compatible(remaining) if remaining else None)
            if token in self._stops:
                stop = token
                break
            if remaining:  # what is left of the healed text after this token (none once it is passed)
                spelling = self._draft_prefixes.spelling(token) or ""
                remaining = remaining[len(spelling):] if spelling and remaining.startswith(spelling) else ""
            proposal.append(token)
            if i < n_draft - 1:  # the last one need not be fed: its successor is never drafted
                logits = self._forward([token])
                self._cached.append(token)
        tokens = self._target_proposal(draft_ids[max(0, fed - CONTEXT_TOKENS) : fed], draft_ids[fed:], proposal,
                                       stop, k)
        if not tokens:
            return None
        # probs None: a point mass, see the module's docstring
        return Draft(tokens=tokens, forwards=self._forwards - forwards_before)

    def update(self, context: Sequence[int], n_accepted: int) -> None:
        """Nothing to do now: the next proposal re-syncs from the context (the text decides what the draft keeps)."""

    def _tokens_to_heal(self, draft_ids: list[int]) -> int:
        """How many of the context's last draft tokens to write again: the most (up to MAX_HEALED) whose spelling
        together is the start of a longer token's ("▁" + "o" of "▁over"); 0 when none is."""
        healed, word = 0, ""
        for m in range(1, min(MAX_HEALED, len(draft_ids) - 1) + 1):
            spelling = self._draft_prefixes.spelling(draft_ids[-m])
            if spelling is None:  # a special token: nothing before it merges across it
                break
            word = spelling + word
            if self._draft_prefixes.extended(word):
                healed = m
        return healed

    def _catch_up(self, draft_ids: list[int], fed: int, changed: int) -> torch.Tensor:
        """Crops the draft's cache to what still agrees with draft_ids[:fed] and feeds the rest; the logits for the
        next draft token. At least one token is fed, as the logits of the last one are not kept."""
        keep = min(changed, len(self._cached))
        limit = min(len(self._cached), fed)
        while keep < limit and self._cached[keep] == draft_ids[keep]:
            keep += 1
        keep = min(keep, fed - 1)
        self._backend.crop(keep)
        del self._cached[keep:]
        fresh = draft_ids[keep:fed]
        self._cached.extend(fresh)
        return self._forward(fresh)

    def _greedy(self, logits: torch.Tensor, allowed: torch.Tensor | None = None) -> int:
        """The draft's most likely token, among `allowed` (draft ids) when given."""
        if allowed is None:
            return self._argmax_token(logits)
        ids = allowed.to(self.device)
        rows = ids if self._row_of is None else self._row_of[ids]
        ids, rows = ids[rows >= 0], rows[rows >= 0]
        if ids.numel() == 0:  # none of them in the proposal vocabulary: unconstrained (the proposal is then dropped)
            return self._greedy(logits)
        return int(ids[torch.argmax(logits[rows])])

    def _target_proposal(self, before: list[int], healed: list[int], proposal: list[int], stop: int | None,
                         k: int) -> list[int]:
        """The draft's tokens as target tokens: their text after the context's (the healed tokens' text cut off),
        encoded by the target's tokenizer as it would tokenize it after the context's text, without the target
        tokens already generated of a cut character; the target's own id of a special token the draft stopped at
        when both have it; at most k.

        The last target token is dropped when the draft's text did not end there and the token is the start of a
        longer one ("Ġhel" of "Ġhello"): the text's next characters would likely merge into it."""
        view = self._view
        text = self._draft_codec.continuation_text(before, proposal)
        if healed:
            head = self._draft_codec.continuation_text(before, healed)
            if not text.startswith(head):
                return []
            text = text[len(head):]
        text = text.rstrip(REPLACEMENT)  # a last draft token that ends inside a character
        tokens: list[int] = []
        if text:
            ids = self._target_codec.continuation_ids(view.text[-CONTEXT_CHARS:], text)
            # None: the text glues onto the context's last word; the target, having ended a token there, would go
            # on with the text tokenized on its own.
            tokens = self._target_codec.encode(text) if ids is None else ids
            pending = view.pending
            if pending:
                if tokens[: len(pending)] != pending:
                    return []
                tokens = tokens[len(pending):]
        finished = stop is not None
        if finished and stop in self._special_to_target and len(tokens) < k:
            tokens.append(self._special_to_target[stop])
        elif not finished and 0 < len(tokens) <= k and self._target_prefixes.extendable(tokens[-1]):
            tokens.pop()
        return tokens[:k]


def _draft_stop_ids(configured: frozenset[int], tokenizer) -> frozenset[int]:
    """Where the draft stops drafting: its special tokens (the end of a turn, of the text) and its model's
    configured EOS ids. What follows them is no text to re-tokenize."""
    return frozenset(set(getattr(tokenizer, "all_special_ids", ()) or ()) | configured)


def _shared_special_tokens(draft_tokenizer, target_tokenizer, stops: frozenset[int]) -> dict[int, int]:
    """Draft special id -> the target's id for the same token string ("<|im_end|>" in two ChatML models), where the
    target has it as one token of its own: proposing it lets the target end its turn on a drafted token."""
    added = target_tokenizer.get_added_vocab() if hasattr(target_tokenizer, "get_added_vocab") else {}
    shared = {}
    for draft_id in stops:
        name = draft_tokenizer.convert_ids_to_tokens(draft_id)
        if isinstance(name, str) and name in added:
            shared[draft_id] = added[name]
    return shared
