"""`specchat models catalog`: the model catalog as a table or JSON, with each model's memory, whether it fits on
this machine, its compatible drafts and the speedup they are predicted to give (engine/catalog.py computes them)."""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

TABLE_DTYPES = ("bf16", "fp32")  # the float memory columns (a GPU, the torch path on a CPU); then the GGUF file's


@dataclass(frozen=True)
class Here:
    """The device the app would run models on here, the memory free there, whether llama.cpp is installed (GGUF
    files run on it on a CPU), and the format --dtype forces ("auto": each model's own, engine/catalog_here.py)."""

    device: str
    dtype: str
    available_bytes: int | None
    llama_cpp: bool = False


def print_catalog(search: str | None, as_json: bool, alpha: float, dtype: str | None, costs_file: Path | None,
                  out=None) -> int:
    from .engine.catalog import CatalogError, catalog_path, dtype_name, load_catalog, load_costs
    from .engine.catalog_here import machine_here

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
    machine = machine_here("auto")
    here = Here(machine.device, dtype_name(dtype) if dtype else "auto", machine.available_bytes, machine.llama_cpp)
    records = [_record(catalog, entry, machine, dtype, costs, alpha) for entry in entries]
    if as_json:
        print(json.dumps({"catalog": str(catalog_path()), "revision": catalog.revision, "alpha": alpha,
                          "here": vars(here), "costs": costs.measured if costs else None, "models": records},
                         indent=1), file=out)
        return 0
    _print_table(records, here, alpha, costs, out)
    return 0


def _record(catalog, entry, machine, dtype: str | None, costs, alpha: float) -> dict:
    """One model's figures: sizes in every format, the format it would run in here (catalog_here.run_format, as
    the Models dialog judges it), its verdict, what the download fetches, and its drafts' predictions."""
    from .engine import catalog as cat
    from .engine.catalog_here import offer, run_format

    fmt = run_format(entry, "auto", machine, dtype)
    fit = cat.fits_in_memory(entry, fmt, machine.available_bytes)
    offered = offer(entry, fmt)
    drafts = []
    for draft in catalog.drafts_for(entry) + catalog.universal_drafts_for(entry):
        prediction = cat.pair_speedup(costs, entry, draft, alpha) if costs and draft.tokenizer == entry.tokenizer \
            else None
        drafts.append({"id": draft.id, "compatibility": cat.compatibility(entry, draft).explanation,
                       "predicted": None if prediction is None else {
                           "alpha": alpha, "k": prediction.k, "speedup": round(prediction.speedup, 3),
                           "basis": prediction.basis}})
    formats = cat.DTYPES + ((entry.gguf.default,) if entry.gguf is not None else ())
    return {
        "id": entry.id, "name": entry.name, "family": entry.family, "roles": list(entry.roles),
        "licence": entry.licence, "gated": entry.gated, "tokenizer": entry.tokenizer, "load_as": entry.load_spec,
        "note": entry.note, "parameters": cat.parameter_count(entry), "download_bytes": cat.download_bytes(entry),
        "weights_bytes": {name: cat.weights_bytes(entry, name) for name in formats},
        "kv_bytes_per_1k_tokens": {name: cat.kv_bytes_per_1k(entry, name) for name in formats},
        "gguf": _gguf_record(entry),
        "here": {"verdict": fit.verdict, "needed_bytes": fit.needed_bytes, "dtype": fit.dtype, "context": fit.context,
                 "explanation": fit.explain(), "load_as": offered.spec, "download": offered.download,
                 "quant": offered.quant, "download_bytes": offered.download_bytes,
                 "kv_bytes_per_1k_tokens": cat.kv_bytes_per_1k(entry, fmt)},
        "drafts": drafts,
    }


def _gguf_record(entry) -> dict | None:
    """The entry's GGUF files: the repository, the default quantization, whether the names were verified, and
    per quantization its file, size (the catalog's, or None), sha256 and the weights' bytes (the size, else the
    estimate)."""
    from .engine import catalog as cat

    if entry.gguf is None:
        return None
    return {"repo": entry.gguf.repo, "default": entry.gguf.default, "verified": entry.gguf.verified,
            "note": entry.gguf.note,
            "quants": [{"quant": q.name, "file": q.file, "spec": entry.gguf.spec(q.name), "size": q.size,
                        "sha256": q.sha256, "weights_bytes": cat.weights_bytes(entry, q.name)}
                       for q in entry.gguf.quants]}


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

    header = ("model", "role", "family", "licence", "gated", "params", *TABLE_DTYPES, "gguf", "KV/1k here",
              "here", "download here", "drafts", f"speedup a={alpha:g}")
    rows = [(r["id"], "/".join(r["roles"]), r["family"], r["licence"], "yes" if r["gated"] else "no",
             format_params(r["parameters"]), *(format_bytes(r["weights_bytes"][d]) for d in TABLE_DTYPES),
             _gguf_cell(r), format_bytes(r["here"]["kv_bytes_per_1k_tokens"]),
             f"{r['here']['verdict']} {r['here']['dtype']}", _download_cell(r),
             ", ".join(_short(d["id"]) for d in r["drafts"]) or "-", _best_prediction(r)) for r in records]
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    numeric = {5, 6, 7, 9, 11}
    for row in (header, *rows):
        print("  ".join(str(cell).rjust(w) if i in numeric else str(cell).ljust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))).rstrip(), file=out)
    print(file=out)
    for note in _notes(here, alpha, costs):
        print(textwrap.fill(note, width=118, subsequent_indent="  "), file=out)


def _gguf_cell(record: dict) -> str:
    """The default GGUF quantization and its weights ("Q4_K_M 1.0 GiB"; "~" where the size is estimated)."""
    from .engine.catalog import format_bytes

    gguf = record["gguf"]
    if gguf is None:
        return "-"
    quant = next(q for q in gguf["quants"] if q["quant"] == gguf["default"])
    return f"{quant['quant']} {'' if quant['size'] else '~'}{format_bytes(quant['weights_bytes'])}"


def _download_cell(record: dict) -> str:
    from .engine.catalog import format_bytes

    here = record["here"]
    if here["download_bytes"] is None:
        return "ships"
    if not here["quant"]:
        return format_bytes(here["download_bytes"])
    quant = next(q for q in record["gguf"]["quants"] if q["quant"] == here["quant"])
    return f"{'' if quant['size'] else '~'}{format_bytes(here['download_bytes'])} {here['quant']}"


def _notes(here: Here, alpha: float, costs) -> list[str]:
    from .engine.catalog import format_bytes

    available = format_bytes(here.available_bytes) if here.available_bytes is not None else "unknown memory"
    engine = " with llama.cpp (GGUF files offered)" if here.device == "cpu" and here.llama_cpp else ""
    formats = f"--dtype {here.dtype} for every model" if here.dtype != "auto" else "each model's format here"
    notes = [f"memory: float weights from each config's parameter count; gguf: the default quantization's file "
             f"(its real size, or ~ parameters x its average bits a weight: Q4_K_M 4.85); KV/1k: what 1,000 tokens of "
             f"context add (llama.cpp keeps a bfloat16 cache). here: {here.device}{engine}, {available} available, "
             f"{formats}; a model fits when its weights, a 4096-token KV cache and 0.5 GiB do with 20% to spare "
             f"(tight: without the 20%). download here: what `specchat models download` or Settings → Models… "
             f"fetches for it here."]
    if costs is None:
        notes.append("speedup: no cost table (resources/catalog_costs.json) to predict from.")
    else:
        measured = costs.measured
        notes.append(f"speedup: predicted at the best K from `specchat costs` on random weights of the same shape "
                     f"({measured.get('date', 'undated')}, {measured.get('cpu', 'unknown CPU')}, "
                     f"{measured.get('torch_threads', '?')} torch thread(s)) and acceptance rate a={alpha:g} "
                     f"(stated, not measured); '-' where the shape was not measured. Details: --json, "
                     f"docs/catalog.md.")
    return notes
