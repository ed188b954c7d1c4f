"""Checking a generation run before it is written: a RunRecord (or a mapping of its fields, no other key) becomes
the generation_runs columns, with its enumerations and number lists checked (Store.record_run, update_run,
save_comparison, save_partial_reply)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from sqlalchemy.orm import Session

from ..core.errors import StorageError
from .records import RUN_SOURCES, RunRecord
from .tables import GenerationRun

# What a run's speedup is against: plain decoding of the same prompt in the same race or benchmark ("measured"),
# the chat reply's own plain steps (GenerationStats.plain_decode_tokens_per_s), or the calibration at load.
CALIBRATED, MEASURED, OWN_PLAIN_STEPS = "calibrated", "measured", "own plain steps"
SPEEDUP_BASES = (CALIBRATED, MEASURED, OWN_PLAIN_STEPS)
# Why a chat reply has no ratio against the calibration (its speedup is None): other programs took the cores while
# it ran (core/machine_load.py), so its speed says nothing against plain decoding's on an idle machine.
BUSY = "other programs busy"
_RUN_FIELDS = frozenset(field.name for field in dataclasses.fields(RunRecord))
_RUN_REQUIRED = frozenset(field.name for field in dataclasses.fields(RunRecord)
                          if field.default is dataclasses.MISSING)


def checked_record(run: RunRecord | Mapping[str, Any]) -> RunRecord:
    """A run as a RunRecord: one already, or a mapping of its fields (StorageError for an unknown field or a
    missing one). Not records.run_record, which makes one from an engine's figures."""
    if isinstance(run, RunRecord):
        return run
    unknown = sorted(set(run) - _RUN_FIELDS)
    if unknown:
        raise StorageError(f"a generation run has no field {', '.join(map(str, unknown))}")
    missing = sorted(_RUN_REQUIRED - run.keys())
    if missing:
        raise StorageError(f"a generation run needs {', '.join(missing)}")
    return RunRecord(**run)


def run_values(run: RunRecord | Mapping[str, Any]) -> dict[str, Any]:
    """The generation_runs columns of a run, checked."""
    record = checked_record(run)
    values = run_changes({field.name: getattr(record, field.name) for field in dataclasses.fields(RunRecord)})
    if values["speedup_basis"] not in (None, *SPEEDUP_BASES, BUSY):
        raise StorageError(f"speedup_basis must be one of {', '.join(SPEEDUP_BASES)}, "
                           f"not {values['speedup_basis']!r}")
    if values["source"] not in RUN_SOURCES:
        raise StorageError(f"a run's source must be one of {', '.join(RUN_SOURCES)}, not {values['source']!r}")
    if values["created_at"] is None:
        del values["created_at"]  # the column's default: now
    return values


def run_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Run fields to write (all of them, or some to change), checked: no unknown field, lists of numbers."""
    unknown = sorted(set(changes) - _RUN_FIELDS)
    if unknown:
        raise StorageError(f"a generation run has no field {', '.join(map(str, unknown))}")
    values = dict(changes)
    for key in ("acceptance_by_position", "proposed_by_position", "accepted_by_position"):
        if values.get(key) is not None:
            values[key] = number_list(values[key], key)
    if values.get("sources") is not None:
        values["sources"] = source_list(values["sources"])
    return values


MAX_SOURCES = 500  # sources one reply may name
MAX_SOURCE_NAME = 300  # characters of a source's name


def source_list(value: Any) -> list | None:
    """A run's sources as stored: [document id or None, name, page or None, passage or None] each, checked (a list
    at most MAX_SOURCES long, names at most MAX_SOURCE_NAME characters, whole numbers); None for none."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or len(value) > MAX_SOURCES:
        raise StorageError(f"sources must be a list of at most {MAX_SOURCES} entries")
    checked = []
    for entry in value:
        if not isinstance(entry, (list, tuple)) or len(entry) != 4:
            raise StorageError("each source must be [document id, name, page, passage]")
        document_id, name, page, passage = entry
        numbers_fine = all(n is None or (isinstance(n, int) and not isinstance(n, bool) and n >= 0)
                           for n in (document_id, page, passage))
        if not numbers_fine or not isinstance(name, str) or len(name) > MAX_SOURCE_NAME:
            raise StorageError("a source's document id, page and passage must be whole numbers, its name a short text")
        checked.append([document_id, name, page, passage])
    return checked or None


def number_list(value: Any, what: str) -> list:
    if isinstance(value, (str, bytes)) or not all(isinstance(x, (int, float)) for x in value):
        raise StorageError(f"{what} must be a list of numbers, not {value!r}")
    return list(value)


def add_run(session: Session, values: dict[str, Any]) -> int:
    row = GenerationRun(**values)
    session.add(row)
    session.flush()
    return row.id
