"""How specchat writes sizes and durations for people: one formatter of each, for the terminal and the window alike
(the Models dialog, the downloads, `specchat models catalog`, the dashboard). Sizes are in decimal units (kB, MB,
GB), as the Hub and browsers show downloads, so that a size in the catalog and a download's progress use the same
unit. Pure Python: no Qt, no torch."""

from __future__ import annotations

SIZE_UNITS = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def format_size(count: float) -> str:
    """Bytes as people read sizes: "512 bytes", "120 MB", "3.4 GB", "14 GB" (one decimal below ten of a unit, none
    above, and none for kB). Takes a byte count (an int, or a float such as a speed in bytes a second)."""
    for unit, size in SIZE_UNITS:
        if count >= size:
            return f"{count / size:.1f} {unit}" if count < 10 * size and unit != "kB" else f"{count / size:.0f} {unit}"
    return f"{count:.0f} bytes"


def format_duration(seconds: float, estimate: bool = False) -> str:
    """A length of time: measured ("12.3 s", "3 min 12 s", "1 h 5 min"), or with `estimate` (a time left, which
    moves with the speed) to the minute only ("12 s", "3 min", "1 h 5 min", and never below "1 s"). Takes
    seconds, returns the text."""
    if seconds < 60:
        return f"{max(seconds, 1):.0f} s" if estimate else f"{seconds:.1f} s"
    minutes, rest = (round(seconds / 60), 0) if estimate else divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min" if estimate else f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
