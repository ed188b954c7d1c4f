"""The race window: plain decoding against the chosen drafters, side by side, replayed and saved.

window.py holds RaceWindow; lanes.py the lanes and chart, table.py the figures and verdict, replay.py the replay
and history.py the saved comparisons.
"""

from .history import ComparisonHistory
from .lanes import LANE_COLOURS, Lane, LaneView, TokensChart, lane_label, short_label
from .replay import SPEEDS, Replay
from .table import RESULT_COLUMNS, DiffDialog, ResultsTable, verdict_html
from .window import RaceWindow

__all__ = ["ComparisonHistory", "DiffDialog", "LANE_COLOURS", "Lane", "LaneView", "RESULT_COLUMNS", "RaceWindow",
           "Replay", "ResultsTable", "SPEEDS", "TokensChart", "lane_label", "short_label", "verdict_html"]
