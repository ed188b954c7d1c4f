"""`specchat models catalog`: the model catalog as a table or JSON, with each model's memory, whether it fits on
this machine, its compatible drafts and the speedup they are predicted to give (engine/catalog.py computes them)."""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

TABLE_DTYPES = ("bf16", "fp32", "q4")  # the memory columns: GPU, the CPU path, and a 4-bit GGUF file


@dataclass(frozen=True)
class Here:
    """The device the app would run a model on here, the weight format it would use, and the memory free there."""

    device: str
    dtype: str
    available_bytes: int | None


def print_catalog(search: str | None, as_json: bool, alpha: float, dtype: str | None, costs_file: Path | None,
                  out=None) -> int:
    from .engine.catalog import CatalogError, catalog_path, load_catalog, load_costs

    out = out or sys.stdout
    catalog = load_catalog()
    entries = catalog.search(search) if search else list(catalog.entries)
    if not entries:
        print(f"specchat: no model in the catalog matches {search!r}", file=sys.stderr)
        return 1
    try:
        costs = load_costs(costs_file)
    except CatalogError:
        if costs_file is not None:  # the user's own file: say what is wrong with it
            raise
        costs = None  # a stripped installation: everything but the predictions still stands
    here = _here(dtype)
    records = [_record(catalog, entry, here, costs, alpha) for entry in entries]
    if as_json:
        print(json.dumps({"catalog": str(catalog_path()), "revision": catalog.revision, "alpha": alpha,
                          "here": vars(here), "costs": costs.measured if costs else None, "models": records},
                         indent=1), file=out)
        return 0
    _print_table(records, here, alpha, costs, out)
    return 0


def _here(dtype: str | None) -> Here:
    """As the app chooses (engine/models.py): CUDA at bf16 (fp16 where bf16 is missing), else MPS at fp16, else
    the CPU at fp32; the memory is the GPU's free memory on CUDA, else the system's available memory."""
    from .engine.catalog import TORCH_DTYPE_NAMES, available_memory_bytes, dtype_name
    from .engine.models import choose_device, choose_dtype

    device = choose_device("auto")
    chosen = dtype_name(dtype) if dtype else TORCH_DTYPE_NAMES[str(choose_dtype(device)).removeprefix("torch.")]
    if device.type == "cuda":
        import torch

        available = int(torch.cuda.mem_get_info(device)[0])
    else:
        available = available_memory_bytes()
    return Here(device=device.type, dtype=chosen, available_bytes=available)


def _record(catalog, entry, here: Here, costs, alpha: float) -> dict:
    from .engine import catalog as cat

    fit = cat.fits_in_memory(entry, here.dtype, here.available_bytes)
    drafts = []
    for draft in catalog.drafts_for(entry):
        prediction = cat.pair_speedup(costs, entry, draft, alpha) if costs else None
        drafts.append({"id": draft.id, "compatibility": cat.compatibility(entry, draft).explanation,
                       "predicted": None if prediction is None else {
                           "alpha": alpha, "k": prediction.k, "speedup": round(prediction.speedup, 3),
                           "basis": prediction.basis}})
    return {
        "id": entry.id, "name": entry.name, "family": entry.family, "roles": list(entry.roles),
        "licence": entry.licence, "gated": entry.gated, "tokenizer": entry.tokenizer, "load_as": entry.load_spec,
        "note": entry.note, "parameters": cat.parameter_count(entry), "download_bytes": cat.download_bytes(entry),
        "weights_bytes": {dtype: cat.weights_bytes(entry, dtype) for dtype in cat.DTYPES},
        "kv_bytes_per_1k_tokens": {dtype: cat.kv_bytes_per_1k(entry, dtype) for dtype in cat.DTYPES},
        "here": {"verdict": fit.verdict, "needed_bytes": fit.needed_bytes, "dtype": fit.dtype, "context": fit.context,
                 "explanation": fit.explain()},
        "drafts": drafts,
    }


def _best_prediction(record: dict) -> str:
    predicted = [(d["predicted"], d["id"]) for d in record["drafts"] if d["predicted"]]
    if not predicted:
        return "-"
    best, draft_id = max(predicted, key=lambda pair: pair[0]["speedup"])
    if best["k"] == 0:
        return f"1.00x (no K pays) {_short(draft_id)}"
    return f"{best['speedup']:.2f}x K={best['k']} {_short(draft_id)}"


def _short(model_id: str) -> str:
    return model_id.rsplit("/", 1)[-1].removesuffix("-Instruct").removesuffix("-it")


def _print_table(records: list[dict], here: Here, alpha: float, costs, out) -> None:
    from .engine.catalog import format_bytes, format_params

    header = ("model", "role", "family", "licence", "gated", "params", *TABLE_DTYPES, f"KV/1k {here.dtype}",
              f"here {here.dtype}", "drafts", f"speedup a={alpha:g}")
    rows = [(r["id"], "/".join(r["roles"]), r["family"], r["licence"], "yes" if r["gated"] else "no",
             format_params(r["parameters"]), *(format_bytes(r["weights_bytes"][d]) for d in TABLE_DTYPES),
             format_bytes(r["kv_bytes_per_1k_tokens"][here.dtype]), r["here"]["verdict"],
             ", ".join(_short(d["id"]) for d in r["drafts"]) or "-", _best_prediction(r)) for r in records]
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    numeric = {5, 6, 7, 8, 9}
    for row in (header, *rows):
        print("  ".join(str(cell).rjust(w) if i in numeric else str(cell).ljust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))).rstrip(), file=out)
    available = format_bytes(here.available_bytes) if here.available_bytes is not None else "unknown memory"
    notes = [f"memory: weights from each config's parameter count (q4: 4.5 bits a weight, as GGUF Q4_0); KV/1k: "
             f"what 1,000 tokens of context add. here: {here.device} at {here.dtype}, {available} available; a "
             f"model fits when its weights, a 4096-token KV cache and 0.5 GiB do with 20% to spare (tight: without "
             f"the 20%)."]
    if costs is None:
        notes.append("speedup: no cost table (resources/catalog_costs.json) to predict from.")
    else:
        measured = costs.measured
        notes.append(f"speedup: predicted at the best K from `specchat costs` on random weights of the same shape "
                     f"({measured.get('date', 'undated')}, {measured.get('cpu', 'unknown CPU')}, "
                     f"{measured.get('torch_threads', '?')} torch thread(s)) and acceptance rate a={alpha:g} "
                     f"(stated, not measured); '-' where the shape was not measured. Details: --json, "
                     f"docs/catalog.md.")
    print(file=out)
    for note in notes:
        print(textwrap.fill(note, width=118, subsequent_indent="  "), file=out)
