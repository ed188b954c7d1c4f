"""The race's figures: the results table (one row per lane), the verdict on whether the outputs are identical and
the word-by-word diff of two lanes whose outputs differ."""

from __future__ import annotations

import difflib
import html
import re

from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QDialogButtonBox, QHeaderView, QTableWidget,
                               QTableWidgetItem, QTextBrowser, QVBoxLayout)

from ...core.run_kind import MIN_DRAFTED_SHARE, RunKind, plainly
from ...core.vocabulary import BIT_IDENTICAL, DISTRIBUTION
from ...engine.race import Track
from ..plain import plain_tip
from .lanes import lane_label, short_label

RESULT_COLUMNS = ("Lane", "Tokens", "Wall time", "Tokens/s", "Speedup", "α", "τ", "Accepted at pos. 1/2/3/4",
                  "Identical")


class ResultsTable(QTableWidget):
    """The measured figures of each lane (engine.race.lane_results), read-only."""

    def __init__(self, parent=None):
        super().__init__(0, len(RESULT_COLUMNS), parent)
        self.setHorizontalHeaderLabels(RESULT_COLUMNS)
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.horizontalHeader().setStretchLastSection(True)
        self.setWordWrap(False)

    def fill(self, results) -> None:
        """One row per lane result (engine.race.LaneResult, the plain lane's first): the speedup with its range, in
        bold where all its runs agree on which side of plain decoding it is; a differing output in red."""
        self.setRowCount(len(results))
        for row, r in enumerate(results):
            shown = r.acceptance_by_position[:4]
            positions = " / ".join(f"{a:.2f}" for a in shown) + (" …" if len(r.acceptance_by_position) > 4 else "")
            positions = positions or "–"
            identical = "–" if r.identical is None else ("✓ yes" if r.identical else "✗ no")
            cells = (short_label(r.drafter), str(r.new_tokens), f"{r.wall_s:.2f} s",
                     f"{r.tokens_per_s:.1f}", speedup_cell(r),
                     f"{r.alpha:.2f}" if r.alpha is not None else "–", f"{r.tau:.2f}" if r.tau else "–",
                     positions, identical)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column == 4:
                    item.setToolTip(plain_tip(speedup_tip(r, results[0])))  # rich text: it wraps
                    if clear_speedup(r):
                        item.setFont(_bold())
                if column == 8 and r.identical is False:
                    item.setForeground(QColor("#b3261e"))
                self.setItem(row, column, item)


def speedup_cell(result) -> str:
    """The Speedup column of a LaneResult: "1.32× (1.21–1.40)", the median of the lane's runs and their range;
    "1.32× (one run)" when it ran once; "decoded plainly" or "decoded almost plainly", and no ratio, when it
    drafted too little (why: speedup_tip); for the plain lane "baseline", with the spread of its own runs
    ("baseline (noise ±3%)")."""
    kind = RunKind.parse(result.drafter)
    if kind.is_plain:
        return f"baseline (noise ±{_plain_noise(result):.0%})" if result.speedup_range else "baseline"
    if result.plainly:
        return plainly(result.draft_proposed, result.draft_accepted, why=False)
    if result.speedup:
        low_high = result.speedup_range
        return f"{result.speedup:.2f}× " + (f"({low_high[0]:.2f}–{low_high[1]:.2f})" if low_high else "(one run)")
    return "other machine" if kind.is_remote else "–"


def clear_speedup(result) -> bool:
    """Whether a lane's ratio is shown in bold: measured over several runs that all fall on one side of plain
    decoding (all faster, or all slower), so that it is more than this machine's noise."""
    low_high = result.speedup_range
    return bool(result.speedup) and low_high is not None and (low_high[0] > 1.0 or low_high[1] < 1.0)


def speedup_tip(result, plain) -> str:
    """What the Speedup cell of a lane (result) stands on, beside the plain lane's result (plain)."""
    kind = RunKind.parse(result.drafter)
    if kind.is_plain:
        if not result.speedup_range:
            return ("The baseline. It ran once: the race was too long to run again, or no lane drafted enough for a "
                    "ratio to measure.")
        return (f"The baseline. Its {result.runs} runs differed from their median by up to "
                f"{_plain_noise(result):.0%}: what two runs of the same decoding differ by on this machine now.")
    if result.plainly:
        return (f"{result.plainly[0].upper()}{result.plainly[1:]}: accepted drafts made less than "
                f"{MIN_DRAFTED_SHARE:.0%} of the reply, so its speed against plain decoding is this machine's noise, "
                "not the drafter's. No ratio is shown.")
    if not result.speedup:
        return ("Another machine's speed says nothing against plain decoding here." if kind.is_remote else "")
    if result.speedup_range is None:
        return ("Each lane ran once (the race was too long to run again), so this ratio's noise is not measured: "
                "a short race runs its lanes again, alternated, and shows their spread.")
    noise = f" Plain decoding's own runs differed by up to {_plain_noise(plain):.0%}." if plain.speedup_range else ""
    return (f"The median of {result.runs} runs, each against the plain run beside it (the lanes alternated), "
            f"and in brackets the lowest and highest.{noise} In bold when every run was on one side of 1×.")


def _plain_noise(result) -> float:
    """The plain lane's largest distance from its median, as a fraction (its speedup_range: runs over median)."""
    low, high = result.speedup_range
    return max(1.0 - low, high - 1.0)


DISTRIBUTION_NOTE = (" The target verified on llama.cpp's fastest kernels, whose rounding depends on how many tokens a "
                     "pass holds: every token follows the model's distribution exactly, but a near-tie can flip, so "
                     "identity here is measured, not promised (Settings → Exactness: bit-identical keeps it).")


def verdict_html(tracks: list[Track], greedy: bool, exactness: str | None = None) -> str:
    """Whether every lane produced plain decoding's tokens, with a diff link per lane that did not; `exactness`
    ("bit-identical" or "distribution", the target's kernels) says which of the two claims the lanes make."""
    if not greedy:
        return ("<b>Sampled decoding:</b> the lanes are different samples of the same distribution (speculative "
                "sampling is exact in distribution, not token by token), so their texts differ.")
    plain = tracks[0]
    differing = [i for i, t in enumerate(tracks[1:], start=1) if not t.same_output(plain)]
    if not differing:
        claim = (DISTRIBUTION_NOTE if exactness == DISTRIBUTION else
                 " The target's kernels are batch-invariant here: bit-identity is guaranteed, not luck."
                 if exactness == BIT_IDENTICAL else "")
        return (f"<span style='color:#2e7d32'><b>✓ Identical output:</b></span> every lane produced the same "
                f"{len(plain.token_ids)} tokens as plain decoding; the speedup costs nothing in quality.{claim}")
    links = ", ".join(f"<a href='diff:{i}'>show diff with {html.escape(tracks[i].drafter)}</a>"
                      for i in differing)
    if exactness == DISTRIBUTION:
        return f"<span style='color:#b3261e'><b>✗ Outputs differ</b></span> from plain decoding ({links}).{DISTRIBUTION_NOTE}"
    return (f"<span style='color:#b3261e'><b>✗ Outputs differ</b></span> from plain decoding ({links}). "
            "Greedy speculative decoding should be lossless; on some hardware, batched and single-token "
            "forward passes round differently and can flip a near-tie.")


WORD = re.compile(r"\s+|\w+|[^\w\s]")


def word_diff(a: str, b: str) -> list[tuple[str, str]]:
    """Two lanes' texts compared word by word (whitespace and punctuation are words of their own), for the diff
    dialog: [(op, text)] in reading order, op "equal", "delete" (only in a) or "insert" (only in b)."""
    left, right = WORD.findall(a), WORD.findall(b)
    pieces: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, left, right, autojunk=False).get_opcodes():
        if op == "equal":
            pieces.append(("equal", "".join(left[i1:i2])))
            continue
        if i2 > i1:
            pieces.append(("delete", "".join(left[i1:i2])))
        if j2 > j1:
            pieces.append(("insert", "".join(right[j1:j2])))
    return pieces


class DiffDialog(QDialog):
    """Where two lanes' outputs differ, word by word (red: only in the plain lane, green: only in the other)."""

    def __init__(self, plain: Track, other: Track, parent=None):
        super().__init__(parent)
        self.setWindowTitle(f"Output differences: plain vs {lane_label(other.drafter)}")
        self.resize(720, 480)
        view = QTextBrowser()
        parts = []
        for op, text in word_diff(plain.text, other.text):
            text = html.escape(text).replace("\n", "<br>")
            if op == "equal":
                parts.append(text)
            elif op == "delete":
                parts.append(f"<span style='background:#fdecea;color:#7a1c16;text-decoration:line-through'>{text}</span>")
            else:
                parts.append(f"<span style='background:#d4f2dd;color:#14532d'>{text}</span>")
        view.setHtml("<p><span style='background:#fdecea'>&nbsp;only in plain&nbsp;</span>&nbsp;&nbsp;"
                     f"<span style='background:#d4f2dd'>&nbsp;only in {html.escape(other.drafter)}&nbsp;</span></p>"
                     "<p style='white-space:pre-wrap'>" + "".join(parts) + "</p>")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(view)
        layout.addWidget(buttons)


def _bold() -> QFont:
    font = QFont()
    font.setBold(True)
    return font
