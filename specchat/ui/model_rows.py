"""What the Models dialog lists: one row per catalog model and per model downloaded from the Hub that the catalog
does not know, with its sizes at the float format it would run in here, whether it fits this machine's memory, and
the speedup its best draft is predicted to give (engine/catalog.py computes the figures). No Qt here."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine import catalog as cat
from ..engine.catalog import Catalog, CatalogEntry, CostTable, Fit

ALPHA = 0.7  # the acceptance rate the predicted speedups are stated at (docs/catalog.md)
GATED_HINT = "gated: accept the licence on huggingface.co and log in with `hf auth login`"
SHIPS = ("embedded", "embedded-draft")  # the load specs of what ships with specchat: nothing to download
FORMAT_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "q4": "GGUF Q4", "q8_0": "GGUF Q8_0"}


@dataclass(frozen=True)
class Machine:
    """Where a model would run here, and the memory free there."""

    device: str  # "cpu", "cuda" or "mps"
    available_bytes: int | None
    native_bf16: bool  # the CPU computes bfloat16 natively (what "auto" precision needs to choose it)

    def describe(self) -> str:
        free = cat.format_bytes(self.available_bytes) if self.available_bytes is not None else "unknown memory"
        return f"{self.device}, {free} available"


def machine_here(device_setting: str = "auto") -> Machine:
    """The device Settings' choice resolves to, its free memory (a GPU's own), and the CPU's bfloat16 support."""
    from ..engine import SpecchatError
    from ..engine.models import choose_device
    from ..engine.precision import cpu_has_native_bf16

    try:
        device = choose_device(device_setting)
    except SpecchatError:  # e.g. CUDA chosen on a machine without it: Settings says so when loading
        device = choose_device("auto")
    if device.type == "cuda":
        import torch

        available = int(torch.cuda.mem_get_info(device)[0])
    else:
        available = cat.available_memory_bytes()
    return Machine(device.type, available, cpu_has_native_bf16())


def run_format(entry: CatalogEntry, precision: str, machine: Machine) -> str:
    """The catalog's name of the weight format the model would run in here with this Precision setting, as
    engine/models.py chooses it: the embedded GGUF file on llama.cpp (CPU), else the setting, else bfloat16 on
    CUDA, float16 on MPS, and on the CPU float32 unless it does not fit and bfloat16 is native
    (engine/precision.py)."""
    from ..engine.precision import auto_cpu_dtype, dtype_label

    if entry.source == "embedded" and machine.device == "cpu":
        return "q4"
    if precision in ("float32", "bfloat16"):
        return cat.dtype_name(precision)
    if machine.device == "cuda":
        return "bf16"
    if machine.device == "mps":
        return "fp16"
    chosen = auto_cpu_dtype(cat.parameter_count(entry), machine.available_bytes, machine.native_bf16)
    return cat.dtype_name(dtype_label(chosen))


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
    dtype = run_format(entry, precision, machine)
    fit = cat.fits_in_memory(entry, dtype, machine.available_bytes)
    speedup, basis = best_speedup(catalog, entry, costs)
    ships = entry.source in SHIPS
    download = "—" if ships else cat.format_bytes(cat.download_bytes(entry))
    role = "/".join(entry.roles)
    return ModelRow(spec=entry.load_spec, hub_id=None if ships else entry.id, entry=entry, name=entry.name,
                    family=entry.family, role=role, licence=entry.licence + (" (gated)" if entry.gated else ""),
                    parameters=cat.format_params(cat.parameter_count(entry)), download=download,
                    memory=f"{cat.format_bytes(fit.needed_bytes)} ({FORMAT_NAMES.get(dtype, dtype)})", fit=fit,
                    speedup=speedup, speedup_basis=basis)


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
    """Rows for downloaded Hub models the catalog does not list: {hub id: snapshot folder}."""
    from ..engine.precision import checkpoint_parameters

    known = {entry.id.lower() for entry in catalog.entries}
    rows = []
    for hub_id, folder in sorted(downloaded.items()):
        if hub_id.lower() in known:
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
        """The drafter that uses this draft: the draft model (which drafts through text by itself where the
        tokenizers differ: engine/drafting/registry.py), or prompt lookup without one."""
        return "model" if self.spec else "pld"


NO_DRAFT = DraftChoice("", "No draft model (prompt lookup)", True, False,
                       "Prompt lookup drafts from the chat itself: no draft model.")


def draft_choices(catalog: Catalog, target: CatalogEntry, is_local) -> list[DraftChoice]:
    """What can be offered as the target's draft: its curated drafts (same tokenizer, best first), then the
    catalog's other draft models (most through text), then none. is_local(spec): whether it is on this computer."""
    curated = catalog.drafts_for(target)
    others = [entry for entry in catalog.entries if entry.is_draft and entry not in curated and entry.id != target.id]
    choices = []
    for draft in curated + others:
        verdict = cat.compatibility(target, draft)
        through_text = draft.tokenizer != target.tokenizer
        mark = "✖" if not verdict.compatible else "✔ through text:" if through_text else "✔"
        where = "" if is_local(draft.load_spec) else ", not downloaded"
        choices.append(DraftChoice(draft.load_spec, f"{mark} {draft.name} ({draft.load_spec}{where})",
                                   verdict.compatible, through_text, verdict.explanation))
    return choices + [NO_DRAFT]
