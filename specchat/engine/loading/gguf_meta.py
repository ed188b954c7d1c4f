"""A GGUF file's tokenizer and configuration, converted once and kept.

transformers builds both by parsing the whole GGUF file in Python (every tensor's header, then the vocabulary and
merges into a tokenizers object): a wait at every start that grows with the file and its vocabulary. The converted
tokenizer and config are saved in the user cache, keyed by the file's path, size and modification time, and later
starts read those small files instead; within one process each is built once.

A kept tokenizer is read without transformers where it can be (light_tokenizer.py: the tokenizers library on
tokenizer.json, the same ids and chat template, in milliseconds instead of the seconds transformers' import takes),
else by transformers' fast tokenizer class directly, not through AutoTokenizer, which imports the model family's
modelling code first. Only the first conversion of a GGUF file needs transformers' AutoTokenizer.

For the embedded model the shipped draft folder already holds the same tokenizer, saved from the embedded file
when the draft was trained (tests/engine/test_gguf_meta.py checks that they agree), so even the first start
parses nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Callable

from ...core.fs import file_fingerprint
from ...core.paths import cache_file

log = logging.getLogger(__name__)

COMPLETE = "complete"
_lock = threading.Lock()
_loaded: dict[tuple[str, str], object] = {}  # (kind, key) -> tokenizer or config, for this process


def metadata_cache_dir() -> Path:
    """Where converted metadata is kept: <user cache folder>/gguf-metadata (core.paths: SPECCHAT_CACHE_DIR, else
    the platform's), one folder per file, named by its stem and file_fingerprint (path, size, modification time)."""
    return cache_file("gguf-metadata")


def gguf_tokenizer(path: Path, seed_folder: Path | None = None, trust_remote_code: bool = False):
    """The tokenizer of the GGUF file at `path`: from this process's copy, else the cache, else `seed_folder` (a
    folder known to hold this file's tokenizer), else converted by transformers and kept. A kept or seed tokenizer
    is a LightTokenizer (no transformers) where light_tokenizer can read its folder exactly, and trust_remote_code
    is not asked for; else transformers' PreTrainedTokenizerFast."""

    def from_gguf():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name,
                                             trust_remote_code=trust_remote_code)

    return _cached("tokenizer", path, lambda folder: read_tokenizer(folder, trust_remote_code), from_gguf,
                   seed_folder)


def read_tokenizer(folder: Path, trust_remote_code: bool = False):
    """A tokenizer saved in `folder`: a LightTokenizer where it reads the folder as transformers would (and no
    remote code is allowed, which only transformers could run), else transformers' fast tokenizer class, which reads
    tokenizer.json and tokenizer_config.json alone (AutoTokenizer would first import the model family's
    configuration, and with it most of transformers' modelling code: seconds). Raises for a damaged folder."""
    if not trust_remote_code:
        from .light_tokenizer import load_light_tokenizer

        light = load_light_tokenizer(folder)
        if light is not None:
            return light
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def gguf_config(path: Path, trust_remote_code: bool = False):
    """The transformers configuration of the GGUF file at `path`, cached as the tokenizer is."""
    from transformers import AutoConfig

    def convert(folder: Path):
        return AutoConfig.from_pretrained(str(folder), trust_remote_code=trust_remote_code)

    def from_gguf():
        return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name, trust_remote_code=trust_remote_code)

    return _cached("config", path, convert, from_gguf, None)


def _cached(kind: str, path: Path, read: Callable[[Path], object], convert: Callable[[], object],
            seed_folder: Path | None):
    key = file_fingerprint(path)
    with _lock:
        if (kind, key) in _loaded:
            return _loaded[(kind, key)]
    folder = metadata_cache_dir() / f"{path.stem}-{key}" / kind
    value = None
    sources = [folder] if (folder / COMPLETE).is_file() else []
    sources += [seed_folder] if seed_folder is not None else []
    for source in sources:
        try:
            value = read(source)
            break
        except Exception as error:  # a damaged cache entry: converted again below
            log.warning("could not read the %s kept in %s: %s", kind, source, error)
    if value is None:
        value = convert()
        _keep(value, folder, path)
    with _lock:
        _loaded[(kind, key)] = value
    return value


def _keep(value, folder: Path, path: Path) -> None:
    """Saves the converted object for the next start; a read-only or full cache only costs that start a
    conversion."""
    staging = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        value.save_pretrained(str(staging))
        (staging / COMPLETE).write_text(str(path), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staging, folder)
    except OSError as error:
        log.warning("could not keep the converted metadata of %s in %s: %s", path.name, folder, error)
        shutil.rmtree(staging, ignore_errors=True)
