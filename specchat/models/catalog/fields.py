"""The checks every block of the model catalog goes through (models/catalog/entries.py, models/catalog/quants.py): the
error a bad file raises, JSON parsing, and fields checked against a {name: (type, required)} spec. Pure Python."""

from __future__ import annotations

import json

from ...core.errors import SpecchatError

KIND_NAMES = {str: "a string", int: "a whole number", bool: "true or false", list: "a list", dict: "an object"}


class CatalogError(SpecchatError):
    """The catalog or its cost table is missing, not JSON, or has an entry that breaks its schema."""


def json_object(text: str, where: str) -> dict:
    """The JSON object in `text`; a CatalogError naming `where`, the line and the column when it is not JSON or
    not an object at the top."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise CatalogError(f"{where}: not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}") \
            from error
    if not isinstance(document, dict):
        raise CatalogError(f"{where}: expected a JSON object at the top, got {type(document).__name__}")
    return document


def check_fields(raw, spec: dict, where: str) -> dict:
    """raw's fields checked against spec {name: (type, required)}: present when required, of the right type
    (positive for integers, not blank for strings), none unknown, so that a misspelt field cannot silently fall
    back to a default. Returns raw; raises CatalogError naming `where` and the field."""
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: expected an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(spec))
    if unknown:
        raise CatalogError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(spec)})")
    for name, (kind, required) in spec.items():
        if name not in raw:
            if required:
                raise CatalogError(f"{where}: missing field {name!r}")
            continue
        value = raw[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise CatalogError(f"{where}: {name} must be {KIND_NAMES[kind]}, got {json.dumps(value)}")
        if kind is int and value < 1:
            raise CatalogError(f"{where}: {name} must be at least 1, got {value}")
        if kind is str and not value.strip():
            raise CatalogError(f"{where}: {name} is empty")
    return raw
