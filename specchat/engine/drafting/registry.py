"""How each kind of drafter is built (make_drafter). The kinds themselves, their names and what each needs, are
core/vocabulary.py's DRAFTERS: adding a drafter is a row there, its class here and its builder in BUILDERS
(tests/test_run_kind.py checks that every kind has one)."""

from __future__ import annotations

from typing import Callable

import torch

from ...core.vocabulary import DRAFTER_KINDS, drafter_kind
from ..loading.compat import shares_token_ids
from .base import Drafter, NoDrafter
from .eagle import EagleDrafter
from .hybrid import LookupHybrid
from .lookup import PromptLookupDrafter
from .model import ModelDrafter
from .past_replies import SuffixIndex
from .universal import UniversalDrafter


def _none(**_) -> Drafter:
    return NoDrafter()


def _lookup(history=None, **_) -> Drafter:
    return PromptLookupDrafter(history=history)


def _model(draft_model, draft_vocab=None, tokenizers=None, **_) -> Drafter:
    return _draft_model_drafter(draft_model, draft_vocab, tokenizers)


def _model_hybrid(draft_model, draft_vocab=None, history=None, tokenizers=None, **_) -> Drafter:
    drafter = _draft_model_drafter(draft_model, draft_vocab, tokenizers)
    return LookupHybrid(PromptLookupDrafter(history=history), drafter, name="hybrid")


def _draft_model_drafter(draft_model, draft_vocab, tokenizers) -> Drafter:
    """Token for token when the draft shares the target's tokenizer (or none is given); through text otherwise."""
    if tokenizers is not None and not shares_token_ids(*tokenizers):
        return UniversalDrafter(draft_model, *tokenizers, vocab_ids=draft_vocab)
    return ModelDrafter(draft_model, vocab_ids=draft_vocab)


def _universal(draft_model, draft_vocab=None, tokenizers=None, **_) -> Drafter:
    if tokenizers is None:
        raise ValueError("the universal drafter needs the target's and the draft's tokenizers")
    return UniversalDrafter(draft_model, *tokenizers, vocab_ids=draft_vocab)


def _head(head, target, **_) -> Drafter:
    return EagleDrafter(head, target)


def _head_hybrid(head, target, history=None, **_) -> Drafter:
    return LookupHybrid(PromptLookupDrafter(history=history), EagleDrafter(head, target), name="eagle-hybrid")


# How each kind of drafter (core/vocabulary.py DRAFTERS, by key) is built from what its row says it needs
BUILDERS: dict[str, Callable[..., Drafter]] = {
    "none": _none, "pld": _lookup, "history": _lookup, "model": _model, "hybrid": _model_hybrid, "eagle": _head,
    "eagle-hybrid": _head_hybrid, "universal": _universal,
}


def _unknown(kind: str) -> Callable[..., Drafter]:
    def build(**_) -> Drafter:
        raise ValueError(f"unknown drafter {kind!r} (choose one of {', '.join(DRAFTER_KINDS)})")

    return build


def make_drafter(kind: str, draft_model: torch.nn.Module | None = None, head: torch.nn.Module | None = None,
                 target: torch.nn.Module | None = None, draft_vocab: torch.Tensor | None = None,
                 history: SuffixIndex | None = None, tokenizers: tuple | None = None) -> Drafter:
    """A drafter of `kind`; the model kinds need `draft_model` (and may propose from `draft_vocab` only), the head
    kinds a `head` and its `target`, the history kind a `history` index. The other lookup kinds read `history`
    too when given one (the app's "draft from past replies" setting). `tokenizers`, (target's, draft's): the model
    kinds draft through text when they differ, and "universal" always does (it needs them)."""
    info = drafter_kind(kind)
    if info.needs_history and history is None:
        raise ValueError(f"the {kind} drafter needs an index of past replies")
    if info.needs_model and draft_model is None:
        raise ValueError(f"the {kind} drafter needs a draft model")
    if info.needs_head and (head is None or target is None):
        raise ValueError(f"the {kind} drafter needs a draft head and its target")
    build = BUILDERS.get(kind) or _unknown(kind)
    return build(draft_model=draft_model, head=head, target=target, draft_vocab=draft_vocab,
                 history=history if info.reads_history else None, tokenizers=tokenizers)
