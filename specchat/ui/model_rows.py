"""What the Models dialog lists: one row per catalog model and per model downloaded from the Hub that the catalog
does not know, with its sizes at the format it would run in here (on a CPU with llama.cpp, a model with GGUF files
is offered and downloaded as its default quantization: models/catalog/fit.py, which `specchat models catalog`
uses too), whether it fits this machine's memory, and the speedup its best draft is predicted to give
(models/catalog/entries.py computes the figures). No Qt here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.formatting import format_size
from ..core.vocabulary import default_drafter
from ..models.catalog import entries as cat
from ..models.catalog.entries import Catalog, CatalogEntry, CostTable, Fit
from ..models.catalog.fit import Machine, run_here
from ..models.catalog.quants import gguf_spec, split_gguf_spec

ALPHA = 0.7  # the acceptance rate the predicted speedups are stated at (docs/catalog.md)
GATED_HINT = "gated: accept the licence on huggingface.co and log in with `hf auth login`"
FORMAT_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "q4": "GGUF Q4", "q8_0": "GGUF Q8_0"}


def format_label(fmt: str) -> str:
    """A format as the dialog says it: "float32", "GGUF Q4_K_M"."""
    return FORMAT_NAMES.get(fmt, f"GGUF {fmt}")


@dataclass(frozen=True)
class ModelRow:
    spec: str  # what Settings loads: a Hub id, "embedded" or "embedded-draft"
    hub_id: str | None  # what a download fetches; None for what ships with specchat
    entry: CatalogEntry | None  # None: a downloaded model the catalog does not know
    name: str
    family: str
    role: str
    licence: str
    parameters: str
    download: str
    memory: str
    fit: Fit | None
    speedup: str
    speedup_basis: str
    quant: str | None = None  # the GGUF quantization the download fetches (one file), or None

    @property
    def is_target(self) -> bool:
        return self.entry is None or self.entry.is_target

    @property
    def ships(self) -> bool:
        return self.hub_id is None

    @property
    def verdict(self) -> str:
        return self.fit.verdict if self.fit is not None else "unknown"

    def licence_text(self) -> str:
        if self.entry is None:
            return "not in the catalog: see the model card on the Hub"
        return f"{self.entry.licence} ({GATED_HINT})" if self.entry.gated else self.entry.licence

    def fit_text(self) -> str:
        """The verdict with its reason, as the table cell's tooltip and the details say it."""
        if self.fit is None:
            return "unknown: the catalog does not describe this model, so its memory is not computed"
        return self.fit.explain()


def catalog_rows(catalog: Catalog, costs: CostTable | None, machine: Machine, precision: str) -> list[ModelRow]:
    return [_catalog_row(catalog, entry, costs, machine, precision) for entry in catalog.entries]


def _catalog_row(catalog: Catalog, entry: CatalogEntry, costs: CostTable | None, machine: Machine,
                 precision: str) -> ModelRow:
    """A catalog model's row: how it runs here (catalog_here.run_here, as `specchat models catalog` says it),
    with its sizes as the dialog shows them and its best predicted speedup."""
    here = run_here(entry, machine, precision)
    offered = here.offer  # on a CPU with llama.cpp: the entry's GGUF file, else the checkpoint
    speedup, basis = best_speedup(catalog, entry, costs)
    download = offered.size_text() or "—"
    if offered.quant:
        download = f"{download} ({offered.quant})"
    return ModelRow(spec=offered.spec, hub_id=offered.download, entry=entry, name=entry.name,
                    family=entry.family, role="/".join(entry.roles),
                    licence=entry.licence + (" (gated)" if entry.gated else ""),
                    parameters=cat.format_params(cat.parameter_count(entry)), download=download,
                    memory=f"{format_size(here.fit.needed_bytes)} ({format_label(here.format)})", fit=here.fit,
                    speedup=speedup, speedup_basis=basis, quant=offered.quant)


def best_speedup(catalog: Catalog, target: CatalogEntry, costs: CostTable | None) -> tuple[str, str]:
    """The best predicted speedup over the target's drafts at ALPHA, and what it rests on; "—" where the
    target's shape was not measured."""
    if costs is None or not target.is_target:
        return "—", ""
    predictions = [(prediction, draft) for draft in catalog.drafts_for(target)
                   if (prediction := cat.pair_speedup(costs, target, draft, ALPHA)) is not None]
    if not predictions:
        return "—", "no measured costs for this model's shape (docs/catalog.md)"
    best, draft = max(predictions, key=lambda pair: pair[0].speedup)
    if best.k == 0:
        return "1.00× (no K pays)", best.basis
    return f"{best.speedup:.2f}× (K={best.k}, {draft.short_name})", best.basis


def local_rows(catalog: Catalog, downloaded: dict[str, str]) -> list[ModelRow]:
    """Rows for downloaded Hub models the catalog does not list: {hub id: snapshot folder}. A repository of GGUF
    files gets a row per file (loaded as "org/name/file.gguf"); the catalog's GGUF repositories have their
    models' rows already."""
    from ..engine.backends.torch.precision import checkpoint_parameters

    known = {entry.id.lower() for entry in catalog.entries}
    known |= {entry.gguf.repo.lower() for entry in catalog.entries if entry.gguf is not None}
    rows = []
    for hub_id, folder in sorted(downloaded.items()):
        if hub_id.lower() in known:
            continue
        gguf_files = _gguf_files(folder)
        if gguf_files:
            rows += [_gguf_row(hub_id, name) for name in gguf_files]
            continue
        try:
            count = checkpoint_parameters(folder)
        except Exception:  # noqa: BLE001 - a damaged or foreign file (a header length of garbage can even be a
            count = None  # MemoryError): the count is only informative, so it is unknown rather than an error
        rows.append(ModelRow(spec=hub_id, hub_id=hub_id, entry=None, name=hub_id.rsplit("/", 1)[-1], family="—",
                             role="downloaded", licence="see its model card",
                             parameters=cat.format_params(count) if count else "—", download="—", memory="—",
                             fit=None, speedup="—", speedup_basis=""))
    return rows


def _gguf_files(folder: str) -> list[str]:
    """The .gguf files of a snapshot that holds no model folder (no config.json), sorted."""
    path = Path(folder)
    if (path / "config.json").is_file():
        return []
    try:
        return sorted(child.name for child in path.iterdir() if child.name.lower().endswith(".gguf"))
    except OSError:
        return []


def _gguf_row(hub_id: str, name: str) -> ModelRow:
    spec = gguf_spec(hub_id, name)
    return ModelRow(spec=spec, hub_id=spec, entry=None, name=name, family="—", role="downloaded",
                    licence="see its model card", parameters="—", download="—", memory="—", fit=None,
                    speedup="—", speedup_basis="")


def row_is_local(row: ModelRow, complete: set[str]) -> bool:
    """Whether the row's model is on this computer: it ships, its GGUF file is downloaded (models/hub/gguf_files.py), or its
    Hub id is among `complete` (lower-cased ids of complete snapshots)."""
    if row.ships:
        return True
    if split_gguf_spec(row.hub_id) is not None:
        from ..models.hub.gguf_files import cached_gguf

        repo, file = split_gguf_spec(row.hub_id)
        return cached_gguf(repo, file) is not None
    return row.hub_id.lower() in complete


def row_kept_bytes(row: ModelRow) -> int:
    """Bytes a cancelled or broken download of the row's model left for the next one to continue."""
    from ..models.hub.snapshots import kept_bytes

    if row.hub_id is None:
        return 0
    parts = split_gguf_spec(row.hub_id)
    return kept_bytes(parts[0] if parts else row.hub_id)


def matches(row: ModelRow, catalog_hits: set[str], text: str) -> bool:
    """The search: a catalog model as Catalog.search finds it, another by its id."""
    if not text.strip():
        return True
    if row.entry is not None:
        return row.entry.id in catalog_hits
    return text.strip().lower() in row.spec.lower()


@dataclass(frozen=True)
class DraftChoice:
    """A draft the dialog offers for a target, with the catalog's verdict on the pair."""

    spec: str  # what Settings loads as the draft; "" for none (prompt lookup)
    label: str
    compatible: bool
    through_text: bool  # the tokenizers differ: drafting goes through text (engine/drafting/universal.py)
    explanation: str

    @property
    def drafter(self) -> str:
        """The drafter the app picks with this draft (vocabulary.default_drafter): prompt lookup first with the draft
        model where it pays (which drafts through text by itself where the tokenizers differ:
        engine/drafting/registry.py), or prompt lookup alone without one."""
        return default_drafter(on_llama_cpp=False, has_draft=bool(self.spec))


NO_DRAFT = DraftChoice("", "No draft model (prompt lookup)", True, False,
                       "Prompt lookup drafts from the chat itself: no draft model.")


def draft_choices(catalog: Catalog, target: CatalogEntry, is_local, machine: Machine | None = None) \
        -> list[DraftChoice]:
    """What can be offered as the target's draft: its curated drafts (same tokenizer, best first), its curated
    universal drafts (through text), then the catalog's other draft models (most through text), then none.
    is_local(spec): whether it is on this computer; machine: where they would run (on a CPU with llama.cpp a
    draft with GGUF files is offered as its GGUF file), None: their Hub ids."""
    curated = catalog.drafts_for(target) + catalog.universal_drafts_for(target)
    others = [entry for entry in catalog.entries if entry.is_draft and entry not in curated and entry.id != target.id]
    choices = []
    for draft in curated + others:
        verdict = cat.compatibility(target, draft)
        through_text = draft.tokenizer != target.tokenizer
        mark = "✖" if not verdict.compatible else "✔ through text:" if through_text else "✔"
        spec = run_here(draft, machine).offer.spec if machine is not None else draft.load_spec
        where = "" if is_local(spec) else ", not downloaded"
        choices.append(DraftChoice(spec, f"{mark} {draft.name} ({spec}{where})", verdict.compatible, through_text,
                                   verdict.explanation))
    return choices + [NO_DRAFT]
