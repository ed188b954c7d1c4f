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

SPEEDUP_BASES = ("calibrated", "measured")
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
    if values["speedup_basis"] not in (None, *SPEEDUP_BASES):
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
    return values


def number_list(value: Any, what: str) -> list:
    if isinstance(value, (str, bytes)) or not all(isinstance(x, (int, float)) for x in value):
        raise StorageError(f"{what} must be a list of numbers, not {value!r}")
    return list(value)


def add_run(session: Session, values: dict[str, Any]) -> int:
    row = GenerationRun(**values)
    session.add(row)
    session.flush()
    return row.id
