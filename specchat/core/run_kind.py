"""What a run is: the one reading of the name a run, a race lane or a benchmark mode is stored and chosen under.

A run's name is a plain string in the database (runs.drafter, comparison_tracks.drafter), on the command line
(`--drafter`, `bench --modes`) and in the race's lanes. RunKind parses it into what it means, and prints it back
unchanged (`str(RunKind.parse(text)) == text` for every string), so stored names never change:

- ours: our engine with one of the drafters ("none" is plain decoding, the baseline of every speedup; "history" is
  prompt lookup that also read past replies; any other name, e.g. one stored by another version, is ours too);
- reference: transformers' generate() beside ours, "hf-none", "hf-pld", "hf-model";
- peers: llama.cpp as its users run it, through llama-cpp-python ("llama-cpp", "llama-cpp-pld") or its
  llama-server binary ("llama-server", "llama-server-draft", "llama-server-ngram");
- remote: a remote engine on another machine, "remote" or "remote <the drafter its server names>".

The drafter kinds and token origins are core/vocabulary.py's; here, as names only, what else must be known without
importing torch (`specchat --help`): the peers' and references' modes and the random-weight shapes of `specchat
costs` (commands/measure_costs.SHAPES). Imports neither torch nor Qt.
"""

from __future__ import annotations

from dataclasses import dataclass

from .vocabulary import HISTORY, LOOKUP_DRAFTERS, MODEL_DRAFTERS, PLAIN, drafter_as_run

# -- names known without torch ------------------------------------------------------------------------------------

REMOTE = "remote"  # a remote engine whose server names no drafter (the race's remote lane)
HF_MODES = ("hf-none", "hf-pld", "hf-model")  # transformers' generate(): plain, its prompt lookup, assisted
LLAMA_CPP_MODES = ("llama-cpp", "llama-cpp-pld")  # llama-cpp-python (bench.peers.PEER_MODES)
LLAMA_SERVER_MODES = ("llama-server", "llama-server-draft", "llama-server-ngram")  # bench.peer_server.SERVER_MODES
SHAPE_NAMES = ("llama-3.1-8b", "llama-3.2-1b", "smollm2-1.7b", "smollm2-360m", "smollm2-135m", "tiny")  # costs


def remote_device(server: str | None = None) -> str:
    """The device a remote engine's run is stored with (runs.device): "remote", or "remote (<server>)" with the
    kind of server it is (EndpointInfo.kind: "specchat", "vllm", ...) when known."""
    return REMOTE if not server else f"{REMOTE} ({server})"


# -- run kinds ------------------------------------------------------------------------------------------------------

OURS = "ours"
TRANSFORMERS = "transformers"
LLAMA_CPP = "llama-cpp"
LLAMA_SERVER = "llama-server"
REMOTE_ENGINE = "remote"
ENGINES = (OURS, TRANSFORMERS, LLAMA_CPP, LLAMA_SERVER, REMOTE_ENGINE)
HF_PREFIX = "hf-"


def _split(text: str) -> tuple[str, str | None]:
    """(engine, drafter) of a run's name: the part after the engine's own name is its drafter (None: none named,
    for the peers and the remote engine); a name of no other engine is ours."""
    if text == REMOTE:
        return REMOTE_ENGINE, None
    if text.startswith(REMOTE + " "):
        return REMOTE_ENGINE, text[len(REMOTE) + 1:]
    if text.startswith(HF_PREFIX):
        return TRANSFORMERS, text[len(HF_PREFIX):]
    for engine in (LLAMA_SERVER, LLAMA_CPP):
        if text == engine:
            return engine, None
        if text.startswith(engine + "-"):
            return engine, text[len(engine) + 1:]
    return OURS, text


@dataclass(frozen=True)
class RunKind:
    """What produced a run: `engine` (one of ENGINES) and the `drafter` named with it (for ours and transformers
    always a name, PLAIN for plain decoding; for the peers the suffix of their mode, "pld", "draft", "ngram", or
    None; for a remote engine the drafter its server names, or None). Construction refuses a pair whose name
    would read back as another (e.g. ours with drafter "hf-x"), so every RunKind round-trips through str()."""

    engine: str
    drafter: str | None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; choose from {', '.join(ENGINES)}")
        if self.drafter is None and self.engine in (OURS, TRANSFORMERS):
            raise ValueError(f"a run of {self.engine} names its drafter")
        if _split(self.label) != (self.engine, self.drafter):
            raise ValueError(f"{self.engine} with drafter {self.drafter!r} would read back as another run kind")

    @classmethod
    def parse(cls, text: str) -> RunKind:
        """The kind a run's stored or typed name stands for; any string parses (unknown names are ours), and
        str() of the result is `text` again."""
        return cls(*_split(text))

    @classmethod
    def ours(cls, drafter: str, history: bool = False) -> RunKind:
        """Our engine with `drafter`; history: whether its lookup read past replies. Prompt lookup that did is
        the history drafter (so the footer and the statistics say so); the hybrids keep their names."""
        return cls(OURS, drafter_as_run(drafter, history))

    @classmethod
    def remote(cls, drafter: str | None = None) -> RunKind:
        """A remote engine; drafter: the one its server names (None or empty: it names none)."""
        return cls(REMOTE_ENGINE, drafter or None)

    @property
    def label(self) -> str:
        """The run's name as stored and typed: "pld", "hf-none", "llama-server-draft", "remote eagle", ..."""
        if self.engine == OURS:
            return self.drafter
        if self.engine == TRANSFORMERS:
            return HF_PREFIX + self.drafter
        if self.engine == REMOTE_ENGINE:
            return REMOTE if self.drafter is None else f"{REMOTE} {self.drafter}"
        return self.engine if self.drafter is None else f"{self.engine}-{self.drafter}"

    def __str__(self) -> str:
        return self.label

    @property
    def colour_key(self) -> str:
        """The key of the run's colour (ui/theme.py DRAFTER_COLOURS): our
        drafter's own; for another engine its name, which has no colour of its own, so all its runs share the
        UI's spare colours whatever drafter they name."""
        return self.drafter if self.engine == OURS else self.engine

    @property
    def is_ours(self) -> bool:
        """Our engine (plain decoding included): per-step statistics, stored runs, a speedup against plain."""
        return self.engine == OURS

    @property
    def is_plain(self) -> bool:
        """Our plain decoding: the baseline every speedup and identity check is measured against."""
        return self.engine == OURS and self.drafter == PLAIN

    @property
    def is_reference(self) -> bool:
        """transformers' generate(), run here beside ours as a reference (timed only, never stored)."""
        return self.engine == TRANSFORMERS

    @property
    def is_peer(self) -> bool:
        """llama.cpp's own generation run here, through llama-cpp-python or llama-server (timed only, never
        stored)."""
        return self.engine in (LLAMA_CPP, LLAMA_SERVER)

    @property
    def is_llama_cpp(self) -> bool:
        return self.engine == LLAMA_CPP

    @property
    def is_llama_server(self) -> bool:
        return self.engine == LLAMA_SERVER

    @property
    def is_remote(self) -> bool:
        """A remote engine: another machine's speed (no speedup against plain decoding here) and its text only
        (no token ids, no K of ours)."""
        return self.engine == REMOTE_ENGINE

    @property
    def needs_draft_model(self) -> bool:
        """Whether running it here needs a draft model: our model kinds, transformers' assisted generation, and
        llama-server's draft-model speculation (a GGUF draft)."""
        return ((self.engine == OURS and self.drafter in MODEL_DRAFTERS)
                or (self.engine == TRANSFORMERS and self.drafter == "model")
                or (self.engine == LLAMA_SERVER and self.drafter == "draft"))

    @property
    def reads_history(self) -> bool:
        """Ours, with a prompt lookup that also drafts from past replies when given them (LOOKUP_DRAFTERS)."""
        return self.engine == OURS and self.drafter in LOOKUP_DRAFTERS

    @property
    def needs_history(self) -> bool:
        """Ours, the history drafter: it drafts from past replies always, so its engine needs their index."""
        return self.engine == OURS and self.drafter == HISTORY


# -- speedups -------------------------------------------------------------------------------------------------------

def speedup(tokens_per_s: float, plain_tokens_per_s: float | None, run: str | RunKind | None = None) -> float | None:
    """A run's speedup over plain decoding: its tokens/s over the baseline's (plain_tokens_per_s, measured in the
    same race or benchmark, or calibrated at load for chat replies). Takes the run's name or RunKind (run) when
    known. Returns None when there is no baseline (None or 0), when the run has no speed (nothing decoded), and
    for a remote engine, whose speed is another machine's and says nothing against plain decoding here. The one
    reading of a speedup for the chat footer (chats/run_book.py), the race (engine/race.py) and the benchmark
    (bench/runner.py)."""
    if run is not None and (run if isinstance(run, RunKind) else RunKind.parse(run)).is_remote:
        return None
    if not plain_tokens_per_s or not tokens_per_s:
        return None
    return tokens_per_s / plain_tokens_per_s


# -- when a speedup is noise ----------------------------------------------------------------------------------------

# Below this share of a run's tokens from accepted drafts, its speed against plain decoding is the machine's noise,
# not the drafter's merit (a first reply read 0.79× "vs plain" with 1 drafted token in 50; a race lane that drafted
# nothing read 1.15×): no ratio is stored or shown for it. The one rule of the chat's footer and baseline
# (chats/run_book.py), the race's lanes (engine/race.py) and the statistics' means (storage, ui/dashboard/).
MIN_DRAFTED_SHARE = 0.1
PLAINLY, ALMOST_PLAINLY = "decoded plainly", "decoded almost plainly"  # what such a run says instead
NOTHING_DRAFTED = f"{PLAINLY} (nothing worth drafting)"
# A model's first reply on this machine: its verification costs are measured once, in the background, and until
# then nothing is known to pay (engine/decoding/speculative.py, SpeculativeEngine._awaits_costs).
AWAITING_COSTS = f"{PLAINLY} (first reply: this computer's check costs are being measured, once)"


def drafted_enough(new_tokens: int, draft_accepted: int) -> bool:
    """Whether a run's accepted drafts (draft_accepted of its new_tokens) made at least MIN_DRAFTED_SHARE of it, so
    that its speed against plain decoding says something about the drafter. False for a run with no tokens and for
    plain decoding (it accepts no drafts)."""
    return new_tokens > 0 and draft_accepted >= MIN_DRAFTED_SHARE * new_tokens


def shown_speedup(ratio: float | None, new_tokens: int, draft_accepted: int) -> float | None:
    """A run's speedup (ratio, as measured or stored) as it may be shown and averaged: None where the run drafted
    too little for it to mean anything (drafted_enough), else the ratio unchanged."""
    return ratio if drafted_enough(new_tokens, draft_accepted) else None


def plainly(draft_proposed: int, draft_accepted: int, why: bool = True, awaiting_costs: bool = False) -> str:
    """What a run of a drafter that drafted too little says instead of a ratio, from its proposed and accepted
    draft tokens: "decoded plainly (nothing worth drafting)" when it proposed none, or AWAITING_COSTS when it was
    held back because the costs were still being measured (`awaiting_costs`), else "decoded almost plainly (N
    drafted tokens kept)"; why=False: without the brackets, where space is short (the race's table)."""
    if not draft_proposed:
        return PLAINLY if not why else AWAITING_COSTS if awaiting_costs else NOTHING_DRAFTED
    kept = f"{draft_accepted} drafted token{'' if draft_accepted == 1 else 's'} kept"
    return f"{ALMOST_PLAINLY} ({kept})" if why else ALMOST_PLAINLY
