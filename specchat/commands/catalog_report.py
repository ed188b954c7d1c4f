"""`specchat models catalog`: the model catalog as a table or JSON, with each model's memory, whether it fits on
this machine, its compatible drafts and the speedup they are predicted to give (models/catalog/entries.py computes them).
`specchat models list`: the models on this computer, with unfinished downloads set apart from them."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from ..core.formatting import format_size
from ..engine.loading.machine import machine_here
from ..models.catalog import entries as cat
from ..models.catalog.entries import CatalogError, catalog_path, dtype_name, format_params, load_catalog, load_costs
from ..models.catalog.fit import memory_rule_text, run_here
from ..models.hub.snapshots import arrived_bytes, cached_repo_ids, downloaded_models
from ..models.sources import list_local_models

TABLE_DTYPES = ("bf16", "fp32")  # the float memory columns (a GPU, the torch path on a CPU); then the GGUF file's


def print_catalog(search: str | None, as_json: bool, alpha: float, dtype: str | None, costs_file: Path | None,
                  out=None) -> int:
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
    forced = dtype_name(dtype) if dtype else "auto"  # "auto": each model's own format here
    records = [_record(catalog, entry, machine, dtype, costs, alpha) for entry in entries]
    if as_json:
        here = {"device": machine.device, "dtype": forced, "available_bytes": machine.available_bytes,
                "llama_cpp": machine.llama_cpp}
        print(json.dumps({"catalog": str(catalog_path()), "revision": catalog.revision, "alpha": alpha,
                          "here": here, "costs": costs.measured if costs else None, "models": records},
                         indent=1), file=out)
        return 0
    _print_table(records, machine, forced, alpha, costs, out)
    return 0


def _record(catalog, entry, machine, dtype: str | None, costs, alpha: float) -> dict:
    """One model's figures: sizes in every format, how it runs here (catalog_here.run_here, as the Models dialog
    judges it: its format, verdict and what the download fetches), and its drafts' predictions."""
    here = run_here(entry, machine, "auto", dtype)
    fit, offered = here.fit, here.offer
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
                 "download_estimated": offered.estimated,
                 "kv_bytes_per_1k_tokens": cat.kv_bytes_per_1k(entry, here.format)},
        "drafts": drafts,
    }


def _gguf_record(entry) -> dict | None:
    """The entry's GGUF files: the repository, the default quantization, whether the names were verified, and
    per quantization its file, size (the catalog's, or None), sha256 and the weights' bytes (the size, else the
    estimate)."""
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


def _print_table(records: list[dict], machine, forced: str, alpha: float, costs, out) -> None:
    """The records as a table, then the notes that say what the columns mean. machine: catalog_here.Machine;
    forced: the format --dtype forces, or "auto"."""
    header = ("model", "role", "family", "licence", "gated", "params", *TABLE_DTYPES, "gguf", "KV/1k here",
              "here", "download here", "drafts", f"speedup a={alpha:g}")
    rows = [(r["id"], "/".join(r["roles"]), r["family"], r["licence"], "yes" if r["gated"] else "no",
             format_params(r["parameters"]), *(format_size(r["weights_bytes"][d]) for d in TABLE_DTYPES),
             _gguf_cell(r), format_size(r["here"]["kv_bytes_per_1k_tokens"]),
             f"{r['here']['verdict']} {r['here']['dtype']}", _download_cell(r),
             ", ".join(_short(d["id"]) for d in r["drafts"]) or "-", _best_prediction(r)) for r in records]
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    numeric = {5, 6, 7, 9, 11}
    for row in (header, *rows):
        print("  ".join(str(cell).rjust(w) if i in numeric else str(cell).ljust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))).rstrip(), file=out)
    print(file=out)
    for note in _notes(machine, forced, alpha, costs):
        print(textwrap.fill(note, width=118, subsequent_indent="  "), file=out)


def _gguf_cell(record: dict) -> str:
    """The default GGUF quantization and its weights ("Q4_K_M 1.1 GB"; "~" where the size is estimated)."""
    gguf = record["gguf"]
    if gguf is None:
        return "-"
    quant = next(q for q in gguf["quants"] if q["quant"] == gguf["default"])
    return f"{quant['quant']} {'' if quant['size'] else '~'}{format_size(quant['weights_bytes'])}"


def _download_cell(record: dict) -> str:
    """What a download fetches here: "ships", "3.4 GB", or "~1.0 GB Q4_K_M" for one GGUF file ("~": estimated)."""
    here = record["here"]
    if here["download_bytes"] is None:
        return "ships"
    size = f"{'~' if here['download_estimated'] else ''}{format_size(here['download_bytes'])}"
    return f"{size} {here['quant']}" if here["quant"] else size


def _notes(machine, forced: str, alpha: float, costs) -> list[str]:
    """The notes under the table: what the memory, gguf, KV, here and download columns mean on this machine
    (machine: catalog_here.Machine; forced: --dtype's format or "auto"), and what the speedups rest on."""
    formats = f"--dtype {forced} for every model" if forced != "auto" else "each model's format here"
    notes = [f"memory: float weights from each config's parameter count; gguf: the default quantization's file "
             f"(its real size, or ~ parameters x its average bits a weight: Q4_K_M 4.85); KV/1k: what 1,000 tokens of "
             f"context add (llama.cpp keeps a bfloat16 cache). here: {machine.describe()}, {formats}; a model needs "
             f"{memory_rule_text()}. download here: what `specchat models download` or Settings → Models… "
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


# --- specchat models list ---------------------------------------------------------------------------------------

def print_local_models(out=None) -> int:
    """`specchat models list`: one line per model that loads offline (what ships, the offline pair, complete Hub
    downloads), then each unfinished Hub download as a "partial" line that says how to resume it, never as a
    model. Returns the exit status (0)."""
    out = out or sys.stdout
    complete = {hub_id.lower() for hub_id in downloaded_models()}
    for spec, kind, detail in list_local_models():
        if kind != "hub" or spec.lower() in complete:  # the cache scan also finds unfinished snapshots
            print(f"{spec:<40} {kind:<9} {detail}", file=out)
    for hub_id, kept in partial_downloads(complete):
        print(f"{hub_id:<40} {'partial':<9} partial download ({format_size(kept)} so far), resume in the Models dialog "
              f"(Settings → Models…) or with `specchat models download {hub_id}`", file=out)
    return 0


def partial_downloads(complete: set[str]) -> list[tuple[str, int]]:
    """(Hub id, bytes on disk) of each model in the Hugging Face cache whose download has not finished: a cache
    folder with files in it, for a model not among `complete` (lower-cased ids of complete snapshots,
    models/hub/snapshots.downloaded_models). No network."""
    found = [(hub_id, arrived_bytes(hub_id)) for hub_id in cached_repo_ids() if hub_id.lower() not in complete]
    return [(hub_id, kept) for hub_id, kept in found if kept]
