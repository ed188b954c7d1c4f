"""GGUF files in the model catalog: an entry's "gguf" block names a Hub repository of llama.cpp quantizations and,
per quantization, its file (with its size and sha256 where they were checked), and these are the bits a weight
takes in each type, for sizing a file the catalog gives no size for. Pure Python, like entries.py
(docs/catalog.md, "GGUF files").

A GGUF file is loaded by the spec "org/name/file.gguf" (the repository, then the file): ModelSource.parse finds it
in the Hugging Face cache, and the download (models/hub/gguf_files.py) fetches that one file."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .fields import CatalogError, check_fields

# Average bits per weight over a whole model for llama.cpp's quantization types and mixes: the block formats at
# their exact cost (Q8_0: 32 int8 weights and an fp16 scale in 34 bytes; Q4_0: 16 bytes of nibbles and a scale per
# 32; IQ4_XS 4.25), and the k-quant mixes at the averages llama.cpp's k-quants pull request (#1684) measured over a
# 7B Llama (Q4_K_M keeps some tensors at Q6_K: 4.85 on average). Small models with large vocabularies run higher
# (their embeddings are a bigger share, often kept at Q6_K or Q8_0), so a catalog entry gives its file's real
# size where it is known, and these only size the others.
GGUF_BITS = {
    "F32": 32.0, "F16": 16.0, "BF16": 16.0, "Q8_0": 8.5, "Q6_K": 6.56, "Q5_K_M": 5.69, "Q5_K_S": 5.54,
    "Q5_1": 6.0, "Q5_0": 5.5, "Q4_K_M": 4.85, "Q4_K_S": 4.58, "Q4_1": 5.0, "Q4_0": 4.5, "IQ4_NL": 4.5,
    "IQ4_XS": 4.25, "Q3_K_L": 4.27, "Q3_K_M": 3.91, "Q3_K_S": 3.5,
}
QUANTS = tuple(GGUF_BITS)
DEFAULT_QUANT = "Q4_K_M"  # the most common GGUF quantization, and what the catalog offers on a CPU
# Bytes of one cached key or value element on llama.cpp: engine/backends/llamacpp/llama_runner.py makes its contexts with a bfloat16 cache.
GGUF_KV_ELEMENT_BYTES = 2

_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
_UNSAFE_IN_NAME = re.compile(r"[\\/:\x00-\x1f\x7f]")
_SPEC = re.compile(r"([A-Za-z0-9][\w.-]*/[\w.-]+)/([^/\\]+)")

GGUF_FIELDS = {"repo": (str, True), "quants": (dict, True), "verified": (bool, True), "default": (str, False),
               "note": (str, False)}
QUANT_FIELDS = {"file": (str, True), "size": (int, False), "sha256": (str, False)}


@dataclass(frozen=True)
class GgufQuant:
    name: str  # the quantization type or mix, as llama.cpp names it ("Q4_K_M")
    file: str  # the file's name at the repository's top level
    size: int | None = None  # its bytes, where the catalog was written with them (the Hub's listing has them too)
    sha256: str | None = None  # its LFS sha256, where checked: a download whose file differs is refused


@dataclass(frozen=True)
class GgufFiles:
    repo: str
    quants: tuple[GgufQuant, ...]
    default: str  # the quantization offered on a CPU: Q4_K_M where the repository has it
    verified: bool  # the repository and file names were checked against the Hub (docs/catalog.md says how)
    note: str = ""

    def get(self, name: str | None = None) -> GgufQuant:
        """The quantization called `name` (the default without one); CatalogError naming those there are."""
        wanted = (name or self.default).upper()
        for quant in self.quants:
            if quant.name == wanted:
                return quant
        raise CatalogError(f"{self.repo} has no {wanted} file in the catalog "
                           f"(it has {', '.join(quant.name for quant in self.quants)})")

    def spec(self, name: str | None = None) -> str:
        """What --target/--draft and Settings load the file by: "org/name/file.gguf"."""
        return gguf_spec(self.repo, self.get(name).file)


def gguf_spec(repo: str, file: str) -> str:
    return f"{repo}/{file}"


def split_gguf_spec(spec: str) -> tuple[str, str] | None:
    """(repository, file) of a spec "org/name/file.gguf", or None when `spec` is not one (a local path, a Hub id,
    an unsafe name)."""
    match = _SPEC.fullmatch(spec.strip())
    if match is None or gguf_name_problem(match[2]) or repo_problem(match[1]):
        return None
    return match[1], match[2]


def repo_problem(repo: str) -> str | None:
    """Why `repo` is not a Hub model id that can name a cache folder, or None."""
    if not _REPO.fullmatch(repo) or ".." in repo or "--" in repo or repo.endswith("."):
        return f"{repo!r} is not a Hub model id (org/name)"
    return None


def gguf_name_problem(name: object) -> str | None:
    """Why `name` cannot be a GGUF file the catalog downloads, or None: one top-level name (no separator of any
    system, no drive, no control character, not "." or ".."), ending in .gguf, and not one part of a split file
    (those need all their parts; the catalog names single files)."""
    if not isinstance(name, str) or not name.strip() or name in (".", ".."):
        return "is not a file name"
    if len(name) > 255 or _UNSAFE_IN_NAME.search(name) or name != name.strip():
        return "must be one file name at the repository's top level (no folders, separators or control characters)"
    if not name.lower().endswith(".gguf"):
        return "is not a .gguf file"
    if _SPLIT.search(name):
        return "is one part of a split GGUF file, which the catalog does not download"
    return None


def parse_gguf(raw, where: str) -> GgufFiles:
    """An entry's "gguf" block, checked: a Hub repository, at least one quantization of a type in GGUF_BITS whose
    file is a single .gguf at the top level that names that quantization, optional sizes and sha256s, and the
    default (Q4_K_M unless given) among them. CatalogError names the field that is wrong."""
    raw = check_fields(raw, GGUF_FIELDS, where)
    problem = repo_problem(raw["repo"])
    if problem:
        raise CatalogError(f"{where}: repo {problem}")
    if not raw["quants"]:
        raise CatalogError(f"{where}: quants must name at least one quantization and its file")
    quants = tuple(_quant(name, value, f"{where} quant {name}") for name, value in raw["quants"].items())
    names = [quant.name for quant in quants]
    default = raw.get("default", DEFAULT_QUANT if DEFAULT_QUANT in names else None)
    if default is None:
        raise CatalogError(f"{where}: no {DEFAULT_QUANT} file, so give \"default\" (one of {', '.join(names)})")
    if default not in names:
        raise CatalogError(f"{where}: default {default!r} is not one of its quants ({', '.join(names)})")
    return GgufFiles(repo=raw["repo"], quants=quants, default=default, verified=raw["verified"],
                     note=raw.get("note", ""))


def _quant(name: str, raw, where: str) -> GgufQuant:
    if name not in GGUF_BITS:
        raise CatalogError(f"{where}: unknown quantization {name!r} (known: {', '.join(QUANTS)})")
    raw = check_fields(raw, QUANT_FIELDS, where)
    problem = gguf_name_problem(raw["file"])
    if problem:
        raise CatalogError(f"{where}: file {raw['file']!r} {problem}")
    if name.lower() not in raw["file"].lower():
        raise CatalogError(f"{where}: file {raw['file']!r} does not name the quantization {name}")
    sha256 = raw.get("sha256")
    if sha256 is not None and not _SHA256.fullmatch(sha256):
        raise CatalogError(f"{where}: sha256 must be 64 lowercase hex digits, got {sha256!r}")
    return GgufQuant(name=name, file=raw["file"], size=raw.get("size"), sha256=sha256)


def gguf_weights_bytes(files: GgufFiles | None, quant: str, parameters: int) -> int:
    """The memory of the weights in GGUF type `quant`: the file's size where the catalog gives it (llama.cpp maps
    the file, so its size is what the weights take), else parameters x GGUF_BITS / 8."""
    if files is not None:
        known = next((q for q in files.quants if q.name == quant and q.size is not None), None)
        if known is not None:
            return known.size
    return round(parameters * GGUF_BITS[quant] / 8)
