"""The model catalog (resources/catalog.json): curated targets with the drafts that share their tokenizer, and what
each one needs. Parameters and memory are computed from the config fields the catalog copies from each model's
config.json; whether a model fits is judged against the memory available here; the speedup speculative decoding
should give is predicted from step costs `specchat costs` measured (resources/catalog_costs.json) and a stated
acceptance rate. An entry's GGUF files (llama.cpp quantizations) are quants.py's. Pure Python: no Qt, no torch
(docs/catalog.md has the formulas)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ...core.acceptance import expected_tokens
from ...core.formatting import format_size
from .fields import CatalogError, check_fields as _fields, json_object as _json_object
from .quants import GGUF_BITS, GGUF_KV_ELEMENT_BYTES, GgufFiles, gguf_weights_bytes, parse_gguf

SCHEMA_VERSION = 1
ROLES = ("target", "draft")

# Bits a weight takes in each storage format. GGUF's Q8_0 keeps blocks of 32 int8 weights with one fp16 scale
# (34 bytes / 32 weights), Q4_0 blocks of 32 4-bit weights with one fp16 scale (18 bytes / 32).
BITS_PER_WEIGHT = {"fp32": 32.0, "bf16": 16.0, "fp16": 16.0, "q8_0": 8.5, "q4": 4.5}
DTYPES = tuple(BITS_PER_WEIGHT)
# Bytes of one cached key or value element: the compute dtype on torch; llama.cpp's caches are bfloat16
# (engine/backends/llamacpp/llama_runner.py) for every GGUF type, these and catalog_gguf.GGUF_BITS' alike.
KV_ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "q8_0": 2, "q4": 2}
TORCH_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

# The verdict on memory: the weights, the KV cache of a VERDICT_CONTEXT-token chat and RUNTIME_BYTES for Python,
# torch and the app must fit, and with HEADROOM to spare (activations, the allocator's slack, other programs'
# growth) the verdict is "fits" rather than "tight".
VERDICT_CONTEXT = 4096
RUNTIME_BYTES = 512 * 2**20
HEADROOM = 1.2


@dataclass(frozen=True)
class Architecture:
    """What a model type adds to the Llama layout the parameter count starts from."""

    qkv_bias: bool  # Qwen2 adds biases to the q, k and v projections
    qk_norm: bool  # Qwen3 and Gemma 3 normalise each head's queries and keys: two weight vectors of head_dim
    norms_per_layer: int  # RMSNorm weight vectors of hidden_size: before attention and the MLP; Gemma 3 also after
    multimodal: bool = False  # loads with a vision tower (the entry's "vision" block)


ARCHITECTURES = {
    "llama": Architecture(qkv_bias=False, qk_norm=False, norms_per_layer=2),
    "qwen2": Architecture(qkv_bias=True, qk_norm=False, norms_per_layer=2),
    "qwen3": Architecture(qkv_bias=False, qk_norm=True, norms_per_layer=2),
    "gemma3_text": Architecture(qkv_bias=False, qk_norm=True, norms_per_layer=4),
    "gemma3": Architecture(qkv_bias=False, qk_norm=True, norms_per_layer=4, multimodal=True),
}

# Field: (type, required). Names and meanings are transformers' config.json ones, so entries are copied, not
# translated; unknown fields are refused so that a misspelt one cannot silently fall back to a default.
CONFIG_FIELDS = {
    "model_type": (str, True), "hidden_size": (int, True), "intermediate_size": (int, True),
    "num_hidden_layers": (int, True), "num_attention_heads": (int, True), "num_key_value_heads": (int, True),
    "head_dim": (int, False), "vocab_size": (int, True), "tie_word_embeddings": (bool, True),
    "max_position_embeddings": (int, True), "torch_dtype": (str, True),
    "sliding_window": (int, False), "sliding_window_pattern": (int, False),
}
VISION_FIELDS = {
    "model_type": (str, True), "hidden_size": (int, True), "intermediate_size": (int, True),
    "num_hidden_layers": (int, True), "image_size": (int, True), "patch_size": (int, True),
    "num_channels": (int, True),
}
ENTRY_FIELDS = {
    "id": (str, True), "name": (str, True), "family": (str, True), "roles": (list, True), "licence": (str, True),
    "gated": (bool, True), "tokenizer": (str, True), "config": (dict, True), "drafts": (list, False),
    "source": (str, False), "cost_shape": (str, False), "note": (str, False), "vision": (dict, False),
    "universal_drafts": (list, False), "gguf": (dict, False),
}


@dataclass(frozen=True)
class ModelShape:
    """The architecture fields of a config.json that parameters and memory follow from."""

    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    torch_dtype: str
    head_dim: int | None = None  # None: hidden_size / num_attention_heads, as transformers defaults it
    sliding_window: int | None = None  # Gemma 3: the local layers attend to this many tokens only
    sliding_window_pattern: int | None = None  # Gemma 3: every N-th layer is global, the others local

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def global_layers(self) -> int:
        """Layers whose KV cache grows with the whole context (all of them without a sliding window)."""
        if not self.sliding_window or not self.sliding_window_pattern:
            return self.num_hidden_layers
        return self.num_hidden_layers // self.sliding_window_pattern


@dataclass(frozen=True)
class VisionShape:
    """A SigLIP vision tower (Gemma 3's multimodal sizes load one with the language model)."""

    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    image_size: int
    patch_size: int
    num_channels: int


@dataclass(frozen=True)
class CatalogEntry:
    id: str  # the Hub id (or specchat's name for what it ships)
    name: str
    family: str
    roles: tuple[str, ...]
    licence: str  # SPDX id, or the licence's own name ("llama3.2", "gemma", "qwen-research")
    gated: bool  # the Hub asks for the licence to be accepted before downloading
    tokenizer: str  # a key of the catalog's "tokenizers": equal keys mean identical token ids
    shape: ModelShape
    drafts: tuple[str, ...] = ()  # curated drafts for this target, best first
    source: str | None = None  # how specchat loads it when not by the Hub id ("embedded", "embedded-draft")
    cost_shape: str | None = None  # a `specchat costs --shape` with this architecture, when there is one
    note: str = ""
    vision: VisionShape | None = None
    universal_drafts: tuple[str, ...] = ()  # curated drafts with another tokenizer: they draft through text
    gguf: GgufFiles | None = None  # its llama.cpp quantizations on the Hub (quants.py)

    @property
    def is_target(self) -> bool:
        return "target" in self.roles

    @property
    def is_draft(self) -> bool:
        return "draft" in self.roles

    @property
    def load_spec(self) -> str:
        """What to give --target/--draft to load it."""
        return self.source or self.id

    @property
    def short_name(self) -> str:
        return self.id.rsplit("/", 1)[-1].removesuffix("-Instruct").removesuffix("-it")


@dataclass(frozen=True)
class Catalog:
    revision: int
    entries: tuple[CatalogEntry, ...]
    tokenizers: dict[str, str]

    def get(self, model_id: str) -> CatalogEntry:
        for entry in self.entries:
            if model_id.lower() in (entry.id.lower(), (entry.source or "").lower()):
                return entry
        raise CatalogError(f"{model_id} is not in the model catalog")

    def targets(self) -> list[CatalogEntry]:
        return [entry for entry in self.entries if entry.is_target]

    def drafts_for(self, target: CatalogEntry) -> list[CatalogEntry]:
        """The curated drafts for a target (validation guarantees they share its tokenizer)."""
        return [self.get(draft_id) for draft_id in target.drafts]

    def universal_drafts_for(self, target: CatalogEntry) -> list[CatalogEntry]:
        """The curated drafts with another tokenizer (validation guarantees it), which draft through text."""
        return [self.get(draft_id) for draft_id in target.universal_drafts]

    def search(self, text: str) -> list[CatalogEntry]:
        """Entries whose id, name, family, licence or tokenizer contains the text (case-insensitive)."""
        needle = text.strip().lower()
        return [entry for entry in self.entries if needle in " ".join(
            (entry.id, entry.name, entry.family, entry.licence, entry.tokenizer, entry.source or "")).lower()]


# --- loading and validation ------------------------------------------------------------------------------------

def catalog_path(name: str = "catalog.json") -> Path:
    """A file shipped in resources/: the catalog, or its cost table (catalog_costs.json)."""
    from ... import resources

    return Path(str(resources.resource(name)))


def load_catalog(path: Path | None = None) -> Catalog:
    path = path or catalog_path()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CatalogError(f"cannot read the model catalog {path}: {getattr(error, 'strerror', None) or error}") \
            from error
    return parse_catalog(text, str(path))


def parse_catalog(text: str, where: str = "catalog") -> Catalog:
    """The catalog in `text`, checked entry by entry; a CatalogError names the file, the entry and the field."""
    document = _json_object(text, where)
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise CatalogError(f"{where}: no schema_version (expected {SCHEMA_VERSION})")
    if version != SCHEMA_VERSION:
        newer = "newer than this specchat reads" if version > SCHEMA_VERSION else "unknown"
        raise CatalogError(f"{where}: schema_version {version} is {newer} (this specchat reads {SCHEMA_VERSION})")
    tokenizers = document.get("tokenizers", {})
    if not isinstance(tokenizers, dict) or not all(isinstance(v, str) for v in tokenizers.values()):
        raise CatalogError(f"{where}: tokenizers must map each tokenizer key to a description")
    models = document.get("models")
    if not isinstance(models, list) or not models:
        raise CatalogError(f"{where}: models must be a non-empty list")
    entries = tuple(_entry(raw, f"{where}: model {n + 1}") for n, raw in enumerate(models))
    catalog = Catalog(revision=document.get("revision", 0), entries=entries, tokenizers=tokenizers)
    _check_links(catalog, where)
    return catalog


def _entry(raw, where: str) -> CatalogEntry:
    raw = _fields(raw, ENTRY_FIELDS, where)
    where = f"{where} ({raw['id']})"
    roles = raw["roles"]
    if not roles or any(role not in ROLES for role in roles):
        raise CatalogError(f"{where}: roles must list one or both of {', '.join(ROLES)}, got {json.dumps(roles)}")
    drafts, universal = raw.get("drafts", []), raw.get("universal_drafts", [])
    if not all(isinstance(d, str) for d in drafts + universal):
        raise CatalogError(f"{where}: drafts and universal_drafts must be lists of model ids")
    if (drafts or universal) and "target" not in roles:
        raise CatalogError(f"{where}: only a target lists drafts")
    shape = _shape(raw["config"], f"{where} config")
    vision = VisionShape(**_fields(raw["vision"], VISION_FIELDS, f"{where} vision")) if "vision" in raw else None
    if ARCHITECTURES[shape.model_type].multimodal != (vision is not None):
        raise CatalogError(f"{where}: model_type {shape.model_type} "
                           + ("loads a vision tower: give its \"vision\" block" if vision is None
                              else "has no vision tower: remove \"vision\""))
    gguf = parse_gguf(raw["gguf"], f"{where} gguf") if "gguf" in raw else None
    if gguf is not None and vision is not None:
        raise CatalogError(f"{where}: a GGUF file holds the language model only (the vision tower is a separate "
                           "file the catalog does not fetch): remove \"gguf\"")
    return CatalogEntry(id=raw["id"], name=raw["name"], family=raw["family"], roles=tuple(roles),
                        licence=raw["licence"], gated=raw["gated"], tokenizer=raw["tokenizer"], shape=shape,
                        drafts=tuple(drafts), source=raw.get("source"), cost_shape=raw.get("cost_shape"),
                        note=raw.get("note", ""), vision=vision, universal_drafts=tuple(universal), gguf=gguf)


def _shape(raw, where: str) -> ModelShape:
    shape = ModelShape(**_fields(raw, CONFIG_FIELDS, where))
    if shape.model_type not in ARCHITECTURES:
        raise CatalogError(f"{where}: model_type {shape.model_type!r} is not one the catalog can size "
                           f"({', '.join(ARCHITECTURES)})")
    if shape.torch_dtype not in TORCH_DTYPE_NAMES:
        raise CatalogError(f"{where}: torch_dtype must be one of {', '.join(TORCH_DTYPE_NAMES)}")
    if shape.num_attention_heads % shape.num_key_value_heads:
        raise CatalogError(f"{where}: num_attention_heads ({shape.num_attention_heads}) is not a multiple of "
                           f"num_key_value_heads ({shape.num_key_value_heads})")
    if shape.head_dim is None and shape.hidden_size % shape.num_attention_heads:
        raise CatalogError(f"{where}: hidden_size is not a multiple of num_attention_heads: give head_dim")
    if (shape.sliding_window is None) != (shape.sliding_window_pattern is None):
        raise CatalogError(f"{where}: sliding_window and sliding_window_pattern go together")
    return shape


def _check_links(catalog: Catalog, where: str) -> None:
    """Ids are unique, and every listed draft exists, can draft and shares its target's tokenizer: the list is
    what the app offers first, so it holds the pairs that draft token for token; universal_drafts hold curated
    drafts with another tokenizer (they draft through text), and nothing else."""
    seen: set[str] = set()
    for entry in catalog.entries:
        if entry.id.lower() in seen:
            raise CatalogError(f"{where}: {entry.id} is listed twice")
        seen.add(entry.id.lower())
        if catalog.tokenizers and entry.tokenizer not in catalog.tokenizers:
            raise CatalogError(f"{where}: {entry.id}: tokenizer {entry.tokenizer!r} is not one of the catalog's "
                               f"tokenizers ({', '.join(catalog.tokenizers)})")
    for target in catalog.entries:
        for draft_id in target.drafts:
            try:
                draft = catalog.get(draft_id)
            except CatalogError:
                raise CatalogError(f"{where}: {target.id} lists the draft {draft_id}, which is not in the catalog") \
                    from None
            verdict = compatibility(target, draft)
            if not draft.is_draft or not verdict.compatible or draft.tokenizer != target.tokenizer:
                reason = "its roles do not include draft" if not draft.is_draft else verdict.explanation
                raise CatalogError(f"{where}: {target.id} lists {draft_id} as a draft, but {reason}")
        for draft_id in target.universal_drafts:
            draft = next((entry for entry in catalog.entries if draft_id.lower() in
                          (entry.id.lower(), (entry.source or "").lower())), None)
            if draft is None or not draft.is_draft or draft.tokenizer == target.tokenizer:
                reason = ("is not in the catalog" if draft is None else "cannot draft" if not draft.is_draft
                          else f"has its tokenizer ({draft.tokenizer}): list it in drafts")
                raise CatalogError(f"{where}: {target.id} lists {draft_id} as a universal draft, but it {reason}")


# --- sizes --------------------------------------------------------------------------------------------------------

def text_parameter_count(shape: ModelShape) -> int:
    """The language model's parameters: embeddings, per layer the attention projections (q and o are
    hidden x heads*head_dim, k and v hidden x kv_heads*head_dim, grouped-query attention), the gated MLP's three
    hidden x intermediate matrices and the norms, then the final norm and the output head unless it is the
    embedding matrix again (tied)."""
    arch = ARCHITECTURES[shape.model_type]
    hidden, head = shape.hidden_size, shape.head_size
    q_width, kv_width = shape.num_attention_heads * head, shape.num_key_value_heads * head
    attention = 2 * hidden * q_width + 2 * hidden * kv_width
    if arch.qkv_bias:
        attention += q_width + 2 * kv_width
    if arch.qk_norm:
        attention += 2 * head
    layer = attention + 3 * hidden * shape.intermediate_size + arch.norms_per_layer * hidden
    embeddings = shape.vocab_size * hidden * (1 if shape.tie_word_embeddings else 2)
    return embeddings + shape.num_hidden_layers * layer + hidden


def vision_parameter_count(vision: VisionShape, text_hidden: int) -> int:
    """A SigLIP tower (patch embedding, learned positions, pre-norm layers with biased attention and MLP, a final
    LayerNorm) and Gemma 3's projector into the language model (an RMSNorm and one vision x text matrix)."""
    h, i = vision.hidden_size, vision.intermediate_size
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * (2 * h)  # q, k, v, o; MLP up and down; 2 LayerNorms
    patches = (vision.image_size // vision.patch_size) ** 2
    embeddings = vision.num_channels * vision.patch_size ** 2 * h + h + patches * h
    projector = h + h * text_hidden
    return embeddings + vision.num_hidden_layers * layer + 2 * h + projector


def parameter_count(entry: CatalogEntry) -> int:
    """Everything that loads with the model: the language model, and the vision tower of a multimodal one."""
    total = text_parameter_count(entry.shape)
    if entry.vision is not None:
        total += vision_parameter_count(entry.vision, entry.shape.hidden_size)
    return total


def weights_bytes(entry: CatalogEntry, dtype: str) -> int:
    """The weights' bytes in a format: a float dtype or the generic "q8_0"/"q4" as parameters x bits per weight;
    a GGUF type ("Q4_K_M") as the entry's file of that type where the catalog gives its size, else parameters x
    catalog_gguf.GGUF_BITS. Quantised files keep a few small tensors (norms, often the embeddings) at higher
    precision, so an estimate falls somewhat short of a real file."""
    name = dtype_name(dtype)
    if name in GGUF_BITS:
        return gguf_weights_bytes(entry.gguf, name, parameter_count(entry))
    return round(parameter_count(entry) * BITS_PER_WEIGHT[name] / 8)


def download_bytes(entry: CatalogEntry, dtype: str | None = None) -> int:
    """What a download fetches: with a GGUF type, that one file (its real size where known); else the Hub
    checkpoint, the weights in the dtype they are stored in (config.json's torch_dtype)."""
    if dtype is not None and dtype_name(dtype) in GGUF_BITS:
        return weights_bytes(entry, dtype)
    return weights_bytes(entry, TORCH_DTYPE_NAMES[entry.shape.torch_dtype])


def kv_cache_bytes(entry: CatalogEntry, tokens: int, dtype: str) -> int:
    """The KV cache after `tokens` tokens: keys and values (2) x kv_heads x head_dim elements per layer and token;
    sliding-window layers hold at most their window."""
    shape, name = entry.shape, dtype_name(dtype)
    element = GGUF_KV_ELEMENT_BYTES if name in GGUF_BITS else KV_ELEMENT_BYTES[name]
    per_layer_token = 2 * shape.num_key_value_heads * shape.head_size * element
    local_layers = shape.num_hidden_layers - shape.global_layers
    local_tokens = min(tokens, shape.sliding_window or tokens)
    return per_layer_token * (shape.global_layers * tokens + local_layers * local_tokens)


def kv_bytes_per_1k(entry: CatalogEntry, dtype: str) -> int:
    """What 1,000 more tokens of context add to the KV cache once past any sliding window (the long-chat rate)."""
    return kv_cache_bytes(entry, 10_000, dtype) - kv_cache_bytes(entry, 9_000, dtype)


def dtype_name(name: str) -> str:
    """The catalog's name of a weight format, from it or from torch's name ("bfloat16" -> "bf16"), or a GGUF type
    in llama.cpp's capitals ("q4_k_m" -> "Q4_K_M"; "q8_0" and "q4" stay the generic estimates)."""
    name = TORCH_DTYPE_NAMES.get(name, name)
    if name in BITS_PER_WEIGHT:
        return name
    if name.upper() in GGUF_BITS:
        return name.upper()
    raise CatalogError(f"unknown weight format {name!r} (known: {', '.join(DTYPES + tuple(GGUF_BITS))})")


# --- will it fit here -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fit:
    verdict: str  # "fits", "tight", "too big" or "unknown" (available memory could not be read)
    needed_bytes: int
    available_bytes: int | None
    dtype: str
    context: int

    def explain(self) -> str:
        """The verdict and its figures in words: "fits: needs 1.7 GB at Q4_K_M with a 4096-token context, 8.6 GB
        available"."""
        need = f"needs {format_size(self.needed_bytes)} at {self.dtype} with a {self.context}-token context"
        if self.available_bytes is None:
            return f"{need}; available memory unknown"
        return f"{self.verdict}: {need}, {format_size(self.available_bytes)} available"


def available_memory_bytes() -> int | None:
    """Memory available to a new program now: psutil's figure where it is installed, else Linux's MemAvailable."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_needed(entry: CatalogEntry, dtype: str, context: int = VERDICT_CONTEXT) -> int:
    """Weights, the KV cache of a chat of `context` tokens (at most the model's window) and the runtime."""
    tokens = min(context, entry.shape.max_position_embeddings)
    return weights_bytes(entry, dtype) + kv_cache_bytes(entry, tokens, dtype) + RUNTIME_BYTES


def fits_in_memory(entry: CatalogEntry, dtype: str, available_bytes: int | None,
                   context: int = VERDICT_CONTEXT) -> Fit:
    """"fits" with HEADROOM to spare, "tight" if it fits only without it, else "too big" (available_bytes:
    e.g. available_memory_bytes(), or a GPU's free memory; None: "unknown")."""
    needed = memory_needed(entry, dtype, context)
    return Fit(memory_verdict(needed, available_bytes), needed, available_bytes, dtype_name(dtype),
               min(context, entry.shape.max_position_embeddings))


def memory_verdict(needed_bytes: int, available_bytes: int | None) -> str:
    """The one rule on memory, for the catalog, the Models dialog and the CPU's choice of float32 alike
    (engine/backends/torch/precision.py): "fits" with HEADROOM to spare, "tight" without it, else "too big"; "unknown" when the
    available memory could not be read."""
    if available_bytes is None:
        return "unknown"
    if needed_bytes * HEADROOM <= available_bytes:
        return "fits"
    return "tight" if needed_bytes <= available_bytes else "too big"


def format_params(count: int) -> str:
    if count >= 999.5e6:  # so that 999.9M reads 1.00B, not 1000M
        return f"{count / 1e9:.2f}B"
    return f"{count / 1e6:.0f}M" if count >= 1e7 else f"{count / 1e6:.1f}M"


# --- can this draft draft for that target ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Compatibility:
    compatible: bool
    explanation: str


def compatibility(target: CatalogEntry, draft: CatalogEntry) -> Compatibility:
    """With one tokenizer the draft's token ids go straight to the target; with two, drafting goes through text
    (engine/drafting/universal.py). Either way the target verifies every token, so replies are exactly its own."""
    if target.tokenizer != draft.tokenizer:
        return Compatibility(True, (
            f"different tokenizers ({draft.short_name}: {draft.tokenizer}, {target.short_name}: {target.tokenizer}): "
            "drafts go through text (universal drafting, --drafter universal), still lossless, but each step "
            "decodes and re-encodes them, and fewer drafts survive the change of tokens"))
    notes = []
    if draft.id == target.id:
        notes.append("a model drafting for itself has every token accepted but pays a full step for each, so it "
                     "cannot be faster")
    elif parameter_count(draft) >= parameter_count(target):
        notes.append("the draft is not smaller than the target, so drafting costs more than it saves")
    if draft.shape.vocab_size != target.shape.vocab_size:
        notes.append(f"output layers are padded differently ({target.shape.vocab_size} and "
                     f"{draft.shape.vocab_size} rows), which is harmless")
    return Compatibility(True, f"same tokenizer ({target.tokenizer}), lossless"
                         + "".join(f"; {note}" for note in notes))


# --- predicted speedup ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CostRun:
    """One `specchat costs --json` report: a target shape's verification curve, and its draft's one-token step."""

    shape: str
    draft_shape: str | None
    device: str
    dtype: str
    context: int
    forward_ms: dict[int, float]  # forward over n new tokens after `context` cached ones, n = 1..max
    draft_ms: float | None

    def comparable(self, other: CostRun) -> bool:
        return (self.device, self.dtype, self.context) == (other.device, other.dtype, other.context)


@dataclass(frozen=True)
class CostTable:
    measured: dict  # date, command, torch, CPU...
    runs: tuple[CostRun, ...]

    def run_for(self, shape: str | None) -> CostRun | None:
        return next((run for run in self.runs if shape and run.shape == shape), None)

    def draft_step_ms(self, draft_shape: str | None, run: CostRun) -> float | None:
        """The draft's one-token step beside `run`: from that run if it measured this draft, else from another run
        on the same device, dtype and context that measured it as a draft or as a target."""
        if draft_shape is None:
            return None
        if run.draft_shape == draft_shape:
            return run.draft_ms
        for other in self.runs:
            if other.comparable(run) and other.draft_shape == draft_shape and other.draft_ms is not None:
                return other.draft_ms
        for other in self.runs:
            if other.comparable(run) and other.shape == draft_shape:
                return other.forward_ms[1]
        return None


def load_costs(path: Path | None = None) -> CostTable:
    path = path or catalog_path("catalog_costs.json")
    try:
        document = _json_object(path.read_text(encoding="utf-8"), str(path))
        runs = tuple(_cost_run(run) for run in document["runs"])
        return CostTable(measured=dict(document.get("measured", {})), runs=runs)
    except (OSError, UnicodeDecodeError) as error:
        raise CatalogError(f"cannot read the cost table {path}: {getattr(error, 'strerror', None) or error}") \
            from error
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CatalogError(f"{path}: not a cost table written by docs/measure/catalog_costs.sh "
                           f"({type(error).__name__}: {error})") from error


def _cost_run(raw: dict) -> CostRun:
    report = raw["report"]
    draft_ms = report.get("draft_forward_ms")
    return CostRun(shape=raw["shape"], draft_shape=raw.get("draft_shape"), device=report["device"],
                   dtype=report["dtype"], context=int(report["context"]),
                   forward_ms={int(n): float(ms) for n, ms in report["target_forward_ms"].items()},
                   draft_ms=None if draft_ms is None else float(draft_ms))


def speedup_at(alpha: float, k: int, c_draft: float, c_verify: float) -> float:
    """Leviathan et al.'s expected speedup over plain decoding for one step of K drafts accepted with rate alpha:
    E[tokens] = (1 - alpha^(K+1)) / (1 - alpha) per step, which costs K draft steps (c_draft each) and one
    verification of K+1 tokens (c_verify), both in units of one plain target step."""
    return expected_tokens(alpha, k) / (k * c_draft + c_verify)


@dataclass(frozen=True)
class Prediction:
    alpha: float
    k: int  # the best K on this curve; 0: no K beats plain decoding, so the policy would not draft
    speedup: float
    basis: str  # where the costs come from, in words


def predicted_speedup(forward_ms: dict[int, float], draft_ms: float, alpha: float) -> tuple[int, float]:
    """The best K and its speedup on a measured curve, the one computation behind `specchat costs`' predictions
    and the catalog's. Takes the target's forward time over n new tokens (n = 1..N), one draft step in the same
    unit (ms or s: only ratios count) and the acceptance rate; returns (K, speedup) with c_verify(K) =
    forward(K+1) / forward(1) and c_draft = draft / forward(1), K up to N - 1; (0, 1.0) where no K beats plain
    decoding."""
    plain = forward_ms[1]
    best_k, best = 0, 1.0
    for k in range(1, max(forward_ms)):
        speedup = speedup_at(alpha, k, draft_ms / plain, forward_ms[k + 1] / plain)
        if speedup > best:
            best_k, best = k, speedup
    return best_k, best


def pair_speedup(costs: CostTable, target: CatalogEntry, draft: CatalogEntry, alpha: float) -> Prediction | None:
    """The predicted speedup of the pair at acceptance rate alpha, or None where the target's shape or the
    draft's step was not measured."""
    run = costs.run_for(target.cost_shape)
    draft_ms = costs.draft_step_ms(draft.cost_shape, run) if run else None
    if run is None or draft_ms is None:
        return None
    k, speedup = predicted_speedup(run.forward_ms, draft_ms, alpha)
    basis = (f"random weights of {run.shape} and {draft.cost_shape} on {run.device} at {run.dtype}, context "
             f"{run.context} ({costs.measured.get('date', 'undated')}); alpha {alpha:g} stated, not measured")
    return Prediction(alpha, k, speedup, basis)


def fits_at_float32(parameters: int, available_bytes: int | None) -> bool:
    """Whether a model of this many parameters fits at float32 by memory_verdict (its headroom spared), as the
    Models dialog, `specchat models catalog` and the loader judge it: weights and runtime, not the KV cache (a
    parameter count does not give it); memory that cannot be read keeps float32."""
    return memory_verdict(parameters * 4 + RUNTIME_BYTES, available_bytes) in ("fits", "unknown")
