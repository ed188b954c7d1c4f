"""The one table of drafters: each kind's names in the app, its colour, what it needs, and how to build it.

Adding a drafter is one DrafterInfo row in DRAFTERS plus its class. Everything that lists or names drafters
(the engine's make_drafter, the CLI's and Settings' choices, the race's check boxes, the statistics window's
names, order and colours, the benchmark's modes) reads it from here. `specchat/run_kind.py` keeps a copy of the keys,
because `specchat --help` must not import torch; tests/test_run_kind.py checks that it matches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..compat import shares_token_ids
from ..history import SuffixIndex
from .base import Drafter, NoDrafter
from .eagle import EagleDrafter
from .hybrid import LookupHybrid
from .lookup import PromptLookupDrafter
from .model import ModelDrafter
from .universal import UniversalDrafter


@dataclass(frozen=True, kw_only=True)
class DrafterInfo:
    key: str  # the name everywhere: CLI, settings, stored runs
    label: str  # in full: tooltips, the status bar, the race's lane tooltips
    short_label: str  # the race's legend and results table, where space is short
    chart_label: str  # the statistics window: legends, axes, filters, tooltips, the benchmark's progress
    box_label: str  # the race's check boxes and lane titles
    phrase: str  # within a sentence (the benchmark dialog: "decoded greedily with <phrase>")
    colour: str  # "#rrggbb", the statistics window's colour for its runs
    menu_rank: int  # place among DRAFTER_KINDS (the CLI's choices, Settings' list): the most capable first
    menu_label: str | None = None  # in Settings' drafter list; None: not offered there
    needs_model: bool = False  # a draft model
    needs_head: bool = False  # a draft head trained for the target
    needs_history: bool = False  # an index of past replies (make_drafter refuses to build it without one)
    reads_history: bool = False  # its prompt lookup also reads past replies when given them
    # (draft_model, head, target, draft_vocab, history, tokenizers) -> the drafter, each checked for presence as needed
    build: Callable[..., Drafter] = field(compare=False, repr=False)


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


DRAFTERS: tuple[DrafterInfo, ...] = (  # in display order: the statistics window's, the race's check boxes
    DrafterInfo(key="none", label="plain decoding", short_label="plain", chart_label="plain",
                box_label="plain decoding", phrase="plain decoding", colour="#6b7280",
                menu_rank=6, menu_label="None (plain)", build=_none),
    DrafterInfo(key="pld", label="prompt lookup", short_label="lookup", chart_label="prompt lookup",
                box_label="prompt lookup", phrase="prompt lookup", colour="#2e8b57",
                menu_rank=5, menu_label="Prompt lookup (n-grams)", reads_history=True, build=_lookup),
    DrafterInfo(key="history", label="prompt lookup + past replies", short_label="history",
                chart_label="lookup + past replies", box_label="+ past replies",
                phrase="prompt lookup + past replies", colour="#00897b",
                menu_rank=4, needs_history=True, reads_history=True, build=_lookup),
    DrafterInfo(key="model", label="draft model", short_label="draft model", chart_label="draft model",
                box_label="draft model", phrase="the draft model", colour="#3b6ea8",
                menu_rank=1, menu_label="Draft model", needs_model=True, build=_model),
    DrafterInfo(key="hybrid", label="draft model + prompt lookup", short_label="hybrid", chart_label="hybrid",
                box_label="model + lookup", phrase="the hybrid drafter (draft model + prompt lookup)",
                colour="#c2185b", menu_rank=0, menu_label="Draft model + prompt lookup", needs_model=True,
                reads_history=True, build=_model_hybrid),
    DrafterInfo(key="eagle", label="draft head (EAGLE)", short_label="head", chart_label="draft head",
                box_label="draft head", phrase="the draft head", colour="#7b52ab",
                menu_rank=3, menu_label="Draft head (EAGLE)", needs_head=True, build=_head),
    DrafterInfo(key="eagle-hybrid", label="draft head + prompt lookup", short_label="head hybrid",
                chart_label="head hybrid", box_label="head + lookup", phrase="the draft head + prompt lookup",
                colour="#d84315", menu_rank=2, menu_label="Draft head (EAGLE) + prompt lookup", needs_head=True,
                reads_history=True, build=_head_hybrid),
    DrafterInfo(key="universal", label="draft model, any tokenizer (through text)", short_label="any tokenizer",
                chart_label="draft model via text", box_label="any-tokenizer draft",
                phrase="the draft model through text (universal drafting)", colour="#b8860b",
                menu_rank=7, needs_model=True, build=_universal),
)

_BY_KEY = {d.key: d for d in DRAFTERS}
DRAFTER_KEYS = tuple(d.key for d in DRAFTERS)  # display order
MENU = tuple(sorted(DRAFTERS, key=lambda d: d.menu_rank))  # the most capable first
DRAFTER_KINDS = tuple(d.key for d in MENU)
MODEL_DRAFTERS = tuple(d.key for d in MENU if d.needs_model)  # the kinds that need a draft model
HEAD_DRAFTERS = tuple(d.key for d in MENU if d.needs_head)  # the kinds that need a draft head trained for the target
LOOKUP_DRAFTERS = tuple(d.key for d in MENU if d.reads_history)  # the kinds whose lookup can also read history


def drafter_info(key: str) -> DrafterInfo:
    """The row of `key`; for a name that is no drafter (a benchmark's reference mode such as hf-none, a run
    stored by another version) a stand-in row named by the key itself, with no colour, that needs nothing and
    builds nothing: the names shown for it are the key."""
    info = _BY_KEY.get(key)
    if info is None:
        info = DrafterInfo(key=key, label=key, short_label=key, chart_label=key, box_label=key, phrase=key,
                           colour="", menu_rank=len(DRAFTERS), build=_unknown(key))
    return info


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
    info = drafter_info(kind)
    if info.needs_history and history is None:
        raise ValueError(f"the {kind} drafter needs an index of past replies")
    if info.needs_model and draft_model is None:
        raise ValueError(f"the {kind} drafter needs a draft model")
    if info.needs_head and (head is None or target is None):
        raise ValueError(f"the {kind} drafter needs a draft head and its target")
    return info.build(draft_model=draft_model, head=head, target=target, draft_vocab=draft_vocab,
                      history=history if info.reads_history else None, tokenizers=tokenizers)
