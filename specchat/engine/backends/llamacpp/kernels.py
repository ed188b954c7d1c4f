"""Which of llama.cpp's kernels a GGUF target runs on, and so what a speculative reply can promise.

A speculative reply equals plain decoding bit for bit only if a verification pass over n tokens gives every row the
numbers a one-token pass would. llama.cpp's CPU matrix products change kernel with the rows of a pass, per tensor
type (docs/exactness.md has the measurements):
- weight repacking (the "extra buffer types": Q4_K, IQ4_NL and others re-laid for AVX2) switches from a
  matrix-vector to a matrix-matrix kernel at 4 rows;
- without repacking, K-quants (Q3_K..Q6_K) and i-quants take a tiled kernel at 8 rows and more;
- IQ4_NL without repacking goes through llamafile's tinyBLAS from 2 rows on.
Each switch changes the order of the sums, enough after many layers to flip a near-tie between two tokens.
Below its switch a kernel is batch-invariant. So for each file, with repacking on and off, we measure `exact_rows`:
the largest pass (up to MAX_CHECKED_ROWS) whose rows are bit-identical to one-token passes. The engine then either
verifies at most that many tokens at once ("bit-identical"; what "auto" does where llama.cpp's default layout is
exact at every size, so that it costs nothing), or takes the fastest kernels with no cap ("same distribution": every
token is still drawn by the exact rule from the verifying pass's distribution, but a greedy reply can part from
plain decoding where its top two logits nearly tie).

The verdict is kept per file, llama.cpp build, CPU and placement in the user cache (`kernels.json`), so it costs
the seconds of its passes once, not at every start. A GPU's kernels (CUDA, Vulkan, Metal) choose their own way by
rows of a pass, so a file whose layers are offloaded (engine/backends/llamacpp/offload.py) is measured on that backend and layer
count, and keeps a verdict of its own.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from specchat.core.fs import fingerprint, read_kept, write_kept
from specchat.core.paths import cache_file
from specchat.core.vocabulary import BIT_IDENTICAL, DISTRIBUTION, EXACTNESS, EXACTNESS_LABELS

from .cache_types import BF16, decoding_types

log = logging.getLogger(__name__)

MAX_CHECKED_ROWS = 16  # the longest verification worth checking: K = 15
# Cached positions before the checked passes. Attention could switch kernels past 512 positions, but only over a
# float16/float32 cache; the runner's bfloat16 cache never does (llama_runner.py; tests/engine/test_llamacpp.py checks
# a 560-token context), so a short prefix keeps the once-per-file check to a few seconds.
CHECK_PREFIX = 128
VERDICTS_FILE = "kernels.json"


@dataclass(frozen=True)
class KernelVerdict:
    """What one file's passes do on this build and CPU, with repacking on or off."""

    exact_rows: int  # passes of 1..exact_rows tokens give bit for bit the rows of one-token passes
    chunked_prefill: bool  # a prompt fed in two chunks ends with the logits of one pass (prefix reuse is exact)


@dataclass(frozen=True)
class KernelChoice:
    """How a target runs: its weights' layout and the cap on a verification pass."""

    repack: bool
    exactness: str  # BIT_IDENTICAL or DISTRIBUTION
    max_pass_rows: int | None  # None: no cap
    reuse_prefix: bool  # whether a prefill may keep the previous generation's positions

    @property
    def label(self) -> str:
        return EXACTNESS_LABELS[self.exactness].claim


# Before a file's first verdict: passes of one row, which every kernel gives bit for bit, so nothing is drafted and
# nothing needs promising; the verdict, measured in the background, then picks "auto"'s choice.
PROVISIONAL = KernelChoice(repack=True, exactness=BIT_IDENTICAL, max_pass_rows=1, reuse_prefix=True)


def measure_verdict(runner, tokens: Sequence[int] | None = None, prefix: int | None = None,
                    check: Callable[[], None] | None = None) -> KernelVerdict:
    """Runs one-token passes over MAX_CHECKED_ROWS tokens after `prefix` cached ones, then passes of 2..16 over
    the same tokens; returns the largest size before the first that differs, and whether a prefill in two chunks
    (each long enough for the prefill kernel) ends as one pass does. `runner`: a LlamaCppRunner. `check`: called
    before every pass (a background measurement stops there when a reply starts: core/one_time.py)."""
    import torch

    if check is not None:
        runner = _Checked(runner, check)

    prefix = prefix or CHECK_PREFIX
    vocab = runner.vocab_size
    tokens = list(tokens or [100 + (7919 * i) % (vocab - 200) for i in range(prefix + MAX_CHECKED_ROWS)])
    cache = runner.new_cache(len(tokens) + 1)
    whole = runner.forward(torch.tensor([tokens[:prefix]]), cache, keep=1)
    one_by_one = [runner.forward(torch.tensor([[t]]), cache, keep=1)[0] for t in tokens[prefix:]]
    exact = 1
    for size in range(2, len(one_by_one) + 1):
        runner.rollback(cache, prefix)
        rows = runner.forward(torch.tensor([tokens[prefix:prefix + size]]), cache, keep=size)
        if not all(torch.equal(rows[i], one_by_one[i]) for i in range(size)):
            break
        exact = size
    runner.rollback(cache, prefix // 2)
    chunked = torch.equal(runner.forward(torch.tensor([tokens[prefix // 2:prefix]]), cache, keep=1), whole)
    runner.rollback(cache, 0)
    return KernelVerdict(exact_rows=exact, chunked_prefill=chunked)


class _Checked:
    """A runner whose every pass first calls `check` (measure_verdict's interruption point)."""

    def __init__(self, runner, check: Callable[[], None]):
        self._runner, self._check = runner, check
        self.vocab_size = runner.vocab_size

    def forward(self, *args, **kwargs):
        self._check()
        return self._runner.forward(*args, **kwargs)

    def new_cache(self, capacity: int):
        return self._runner.new_cache(capacity)

    def rollback(self, cache, keep: int) -> None:
        self._runner.rollback(cache, keep)


def choose(verdicts: dict[bool, KernelVerdict], wanted: str) -> KernelChoice:
    """The kernels for `wanted` ("auto", "bit-identical" or "distribution") given the verdicts by repack setting.
    Bit-identity takes the setting that allows the longest exact pass (repacking on at a tie: it is llama.cpp's
    default and its fastest one-token kernel). "auto" takes bit-identity where it is free: llama.cpp's default
    (repacked) layout exact at every checked size with exact chunked prefills; elsewhere it costs decode speed
    (docs/exactness.md measures how much), so "auto" verifies on the fastest kernels and says so."""
    if wanted not in EXACTNESS:
        raise ValueError(f"unknown exactness {wanted!r} (use {', '.join(EXACTNESS)})")
    fastest = KernelChoice(repack=True, exactness=DISTRIBUTION, max_pass_rows=None, reuse_prefix=True)
    if wanted == DISTRIBUTION:
        return fastest
    if wanted == "auto":
        default = verdicts.get(True)
        if default is None or default.exact_rows < MAX_CHECKED_ROWS or not default.chunked_prefill:
            log.info("llama.cpp's fastest kernels are not batch-invariant for this file: replies keep the "
                     "model's distribution, rounding may differ")
            return fastest
    repack = max(verdicts, key=lambda setting: (verdicts[setting].exact_rows, setting))
    verdict = verdicts[repack]
    return KernelChoice(repack=repack, exactness=BIT_IDENTICAL, max_pass_rows=verdict.exact_rows,
                        reuse_prefix=verdict.chunked_prefill)


def verdicts_for(path: Path, measure: Callable[[bool], KernelVerdict], settings: Sequence[bool] = (True, False),
                 cache_file: Path | None = None, placement: str = "") -> dict[bool, KernelVerdict]:
    """The verdict for each repack setting, in order until one is exact at every checked size: from the cache when
    this file, build, CPU and placement (offload.Placement.key: "" on the CPU) were checked before, else measured
    by `measure(repack)` and kept."""
    cache_file = cache_file or default_cache_file()
    kept = _read_cache(cache_file)
    found: dict[bool, KernelVerdict] = {}
    changed = False
    for repack in settings:
        if any(v.exact_rows >= MAX_CHECKED_ROWS and v.chunked_prefill for v in found.values()):
            break  # no other setting can do better (and the first one tried wins a tie)
        key = verdict_key(path, repack, placement)
        if key in kept:
            found[repack] = KernelVerdict(**kept[key])
            continue
        found[repack] = measure(repack)
        kept[key] = asdict(found[repack])
        changed = True
    if changed:
        _write_cache(cache_file, kept)
    return found


def verdict_kept(path: Path, repack: bool, placement: str = "", cache_file: Path | None = None) -> bool:
    """Whether this file's verdict for `repack` on this build, CPU and placement is in the cache already."""
    return verdict_key(path, repack, placement) in _read_cache(cache_file or default_cache_file())


def verdict_key(path: Path, repack: bool, placement: str = "") -> str:
    """The file (path, size, modification time), llama.cpp's build, the CPU's features, the setting, the decoding
    cache's types where they are not both bfloat16 and, for a file whose layers are offloaded, the GPU backend,
    device and layer count (a GPU's kernels have verdicts of their own)."""
    stat = path.stat()
    parts = [str(path.resolve()), str(stat.st_size), str(stat.st_mtime_ns), _llama_build(), _cpu_features(),
             f"repack={int(repack)}", f"tiled={os.environ.get('GGML_CPU_TILED_MM', '')}"]
    if placement:
        parts.append(f"offload={placement}")
    kv = decoding_types(offloaded=bool(placement))
    if kv != (BF16, BF16):  # the cache the verdict was measured over (a bfloat16 one before 2026-12-07)
        parts.append(f"kv={kv[0]}/{kv[1]}")
    return fingerprint(*parts, digits=24)


def default_cache_file() -> Path:
    """Where the verdicts are kept: kernels.json in the user cache (core.paths: SPECCHAT_CACHE_DIR, else the
    platform's), with what else is measured once per file, build and CPU (the cost curves)."""
    return cache_file(VERDICTS_FILE)


def _read_cache(path: Path) -> dict:
    """The kept verdicts (core.fs.read_kept), those of the right shape."""
    return {key: value for key, value in read_kept(path).items()
            if isinstance(value, dict) and set(value) == {"exact_rows", "chunked_prefill"}
            and isinstance(value["exact_rows"], int) and isinstance(value["chunked_prefill"], bool)}


def _write_cache(path: Path, data: dict) -> None:
    write_kept(path, data, "llama.cpp's kernel verdicts")


def _llama_build() -> str:
    try:
        import llama_cpp

        return f"{llama_cpp.__version__}:{Path(llama_cpp.__file__).parent.stat().st_mtime_ns}"
    except (ImportError, OSError):
        return "none"


def _cpu_features() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith(("flags", "Features")):
                    return fingerprint(line, digits=12)
    except OSError:
        pass
    import platform

    return platform.machine() + platform.processor()
