"""The app's words, each defined once: where a token came from (Origin), why a reply ended (finish reasons), what a
reply promises against plain decoding (exactness), and the kinds of drafter, with one table of the labels each is
shown under. The engine, storage, the server, the CLI and the window all read them from here.

Imports neither torch nor Qt (`specchat --help` and the storage layer need these names without the engine); the
drafters' behaviour (how each kind is built) stays in engine/drafting/registry.py, keyed by DrafterKind.key.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

# -- the bounds of a reply's settings (the server's and the command line's) ------------------------------------------

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what the statistics database stores (seed, top_k)
MAX_TEMPERATURE = 2.0  # as OpenAI's API: above it, sampling is close to uniform noise
MIN_TEMPERATURE = 1e-3  # a temperature below it (but 0) samples the most likely token in all but name

# -- token origins --------------------------------------------------------------------------------------------------


class Origin(IntEnum):
    """Where a generated token came from."""

    TARGET = 0  # produced by the target model itself (first token, correction or bonus token)
    DRAFT = 1  # proposed by the drafter and accepted by the target's verification
    INFERRED_DRAFT = 2  # a remote server's token that came in one streamed step with others: accepted, by inference


TARGET_ORIGIN = "target"
DRAFT_ORIGIN = "draft"
INFERRED_ORIGIN = "inferred"
# The one table of origin names: the name shown and stored for each origin (spans, the API's `specchat` field)
ORIGIN_NAMES = {Origin.TARGET: TARGET_ORIGIN, Origin.DRAFT: DRAFT_ORIGIN, Origin.INFERRED_DRAFT: INFERRED_ORIGIN}

UNKNOWN_TOKEN = -1  # the token id of a remote engine's token: it sends text, not token ids


def origin_name(origin: int) -> str:
    """The name of a token origin, given an Origin or its int value; an unknown value (a newer version's) reads as
    the target's own token, which claims nothing about drafts."""
    return ORIGIN_NAMES.get(int(origin), TARGET_ORIGIN)


# -- why a reply ended ----------------------------------------------------------------------------------------------

EOS = "eos"  # the model's end-of-sequence token
STOP = "stop"  # a stop string
LENGTH = "length"  # the reply length limit
CONTEXT = "context"  # the model's context window is full
CANCELLED = "cancelled"  # the user (or a shutdown) stopped it
FINISH_REASONS = (EOS, STOP, LENGTH, CONTEXT, CANCELLED)  # the engine's
# and the stored reply's besides: still streaming; cut short by a crash or a kill (found streaming at the next
# start: Store.recover_interrupted); ended by an error
STREAMING = "streaming"
INTERRUPTED = "interrupted"
ERROR = "error"


# -- exactness: what a drafted reply promises against plain decoding ------------------------------------------------

AUTO = "auto"
BIT_IDENTICAL = "bit-identical"  # every verification is batch-invariant: greedy replies equal plain decoding
DISTRIBUTION = "distribution"  # the fastest kernels: the same distribution, rounding may differ
EXACTNESS = (AUTO, BIT_IDENTICAL, DISTRIBUTION)  # Settings' choices (AUTO resolves to one of the other two)


@dataclass(frozen=True)
class ExactnessLabels:
    """The words of one exactness: in Settings' list, in full (the status bar, the CLI's banner), short (a
    model's description) and under a reply (its footer)."""

    setting: str
    claim: str = ""
    short: str = ""
    footer: str = ""


EXACTNESS_LABELS = {
    AUTO: ExactnessLabels(setting="Automatic (bit-identical where it costs no speed)"),
    BIT_IDENTICAL: ExactnessLabels(setting="Bit-identical to plain decoding", claim="bit-identical to plain decoding",
                                   short="bit-identical", footer="bit-identical to plain"),
    DISTRIBUTION: ExactnessLabels(setting="Same distribution (fastest kernels)",
                                  claim="same distribution, rounding may differ", short="same distribution",
                                  footer="same distribution as plain"),
}


# -- drafter kinds --------------------------------------------------------------------------------------------------

PLAIN = "none"  # plain decoding: the target alone
PROMPT_LOOKUP = "pld"
HISTORY = "history"  # prompt lookup over the prompt and past replies: the only kind that needs them


@dataclass(frozen=True, kw_only=True)
class DrafterKind:
    """One kind of drafter, as named and chosen: its key and labels, and what it needs to be built."""

    key: str  # the name everywhere: CLI, settings, stored runs
    label: str  # in full: tooltips, the status bar, the race's lane tooltips
    short_label: str  # the race's legend and results table, where space is short
    chart_label: str  # the statistics window: legends, axes, filters, tooltips, the benchmark's progress
    box_label: str  # the race's check boxes and lane titles
    phrase: str  # within a sentence (the benchmark dialog: "decoded greedily with <phrase>")
    menu_rank: int  # place among DRAFTER_KINDS (the CLI's choices, Settings' list): the most capable first
    menu_label: str | None = None  # in Settings' drafter list; None: not offered there
    needs_model: bool = False  # a draft model
    needs_head: bool = False  # a draft head trained for the target
    needs_history: bool = False  # an index of past replies (make_drafter refuses to build it without one)
    reads_history: bool = False  # its prompt lookup also reads past replies when given them


DRAFTERS: tuple[DrafterKind, ...] = (  # in display order: the statistics window's, the race's check boxes
    DrafterKind(key=PLAIN, label="plain decoding", short_label="plain", chart_label="plain",
                box_label="plain decoding", phrase="plain decoding", menu_rank=6, menu_label="None (plain)"),
    DrafterKind(key=PROMPT_LOOKUP, label="prompt lookup", short_label="lookup", chart_label="prompt lookup",
                box_label="prompt lookup", phrase="prompt lookup", menu_rank=5, menu_label="Prompt lookup (n-grams)",
                reads_history=True),
    DrafterKind(key=HISTORY, label="prompt lookup + past replies", short_label="history",
                chart_label="lookup + past replies", box_label="+ past replies",
                phrase="prompt lookup + past replies", menu_rank=4, needs_history=True, reads_history=True),
    DrafterKind(key="model", label="draft model", short_label="draft model", chart_label="draft model",
                box_label="draft model", phrase="the draft model", menu_rank=1, menu_label="Draft model",
                needs_model=True),
    DrafterKind(key="hybrid", label="draft model + prompt lookup", short_label="hybrid", chart_label="hybrid",
                box_label="model + lookup", phrase="the hybrid drafter (draft model + prompt lookup)",
                menu_rank=0, menu_label="Draft model + prompt lookup", needs_model=True, reads_history=True),
    DrafterKind(key="eagle", label="draft head (EAGLE)", short_label="head", chart_label="draft head",
                box_label="draft head", phrase="the draft head", menu_rank=3, menu_label="Draft head (EAGLE)",
                needs_head=True),
    DrafterKind(key="eagle-hybrid", label="draft head + prompt lookup", short_label="head hybrid",
                chart_label="head hybrid", box_label="head + lookup", phrase="the draft head + prompt lookup",
                menu_rank=2, menu_label="Draft head (EAGLE) + prompt lookup", needs_head=True, reads_history=True),
    DrafterKind(key="universal", label="draft model, any tokenizer (through text)", short_label="any tokenizer",
                chart_label="draft model via text", box_label="any-tokenizer draft",
                phrase="the draft model through text (universal drafting)", menu_rank=7, needs_model=True),
)

_BY_KEY = {d.key: d for d in DRAFTERS}
DRAFTER_KEYS = tuple(d.key for d in DRAFTERS)  # display order
MENU = tuple(sorted(DRAFTERS, key=lambda d: d.menu_rank))  # the most capable first
DRAFTER_KINDS = tuple(d.key for d in MENU)  # the CLI's choices, in menu order
MODEL_DRAFTERS = tuple(d.key for d in MENU if d.needs_model)  # the kinds that need a draft model
HEAD_DRAFTERS = tuple(d.key for d in MENU if d.needs_head)  # the kinds that need a draft head trained for the target
LOOKUP_DRAFTERS = tuple(d.key for d in MENU if d.reads_history)  # the kinds whose lookup can also read history


def drafter_kind(key: str) -> DrafterKind:
    """The row of `key`; for a name that is no drafter (a benchmark's reference mode such as hf-none, a run stored
    by another version) a stand-in row named by the key itself that needs nothing: the names shown for it are the
    key."""
    kind = _BY_KEY.get(key)
    if kind is None:
        kind = DrafterKind(key=key, label=key, short_label=key, chart_label=key, box_label=key, phrase=key,
                           menu_rank=len(DRAFTERS))
    return kind


def drafter_as_run(drafter: str, read_past_replies: bool) -> str:
    """The drafter a run is named and stored under: prompt lookup that also read past replies is the history
    drafter (so the footer and the statistics say so); every other kind keeps its name."""
    return HISTORY if read_past_replies and drafter == PROMPT_LOOKUP else drafter


def default_drafter(on_llama_cpp: bool, has_draft: bool, has_head: bool = False) -> str:
    """What the app picks when the user has not (`--drafter` unset, "Use the offline pair", a draft chosen in the
    Models dialog). Prompt lookup first: it is free and pays wherever a reply copies. On llama.cpp on a CPU, lookup
    alone: there a verification of n tokens costs far more than one pass (its curve is steep), and the offline
    pair's 0.5B draft never paid (docs/performance.md, "Drafting that pays where replies copy"), while a hybrid's
    model costs its catch-up passes. Elsewhere the pair's model joins the lookup where the policy finds it pays
    (engine/decoding/adaptive.py weighs them at every step): the draft head's hybrid, else the draft model's."""
    if on_llama_cpp:
        return PROMPT_LOOKUP
    return "eagle-hybrid" if has_head else "hybrid" if has_draft else PROMPT_LOOKUP
