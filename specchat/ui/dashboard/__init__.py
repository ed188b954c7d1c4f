"""The statistics dashboard: every stored generation run (chat replies, race lanes, benchmark prompts), filtered,
summed, charted and exported, and a benchmark that adds measured runs to it.

The figures come from the Store (RunRow, GroupStats); what is computed here without Qt (the accepted-length
distribution, the summary of the filtered runs, the CSV and JSON rows) is kept in module-level functions so it can be
tested without a window.

The package holds:
- stats: the Qt-free computations and formatting (no PySide6 import),
- charts: the QtCharts chart views,
- benchmark: the benchmark dialog and the code that runs a benchmark (BenchmarkHost, DashboardWindow's base),
- window: DashboardWindow, its summary cards and groups table.
The names below are re-exported so that `from specchat.ui.dashboard import X` works as it did for the single module.
"""

from .benchmark import (BENCH_DEVICE_USER, DEFAULT_BENCH_PROMPTS, DEFAULT_BENCH_TOKENS, BenchmarkDialog, BenchmarkHost,
                        BenchmarkProgress, BenchmarkRun, benchmark_modes)
from .charts import ChartView, GroupBarsChart, GroupsChart, TimelineChart
from .stats import (ALL_TIME, CHART_FILES, CSV_COLUMNS, CUSTOM_DATES, GROUP_COLUMNS, GROUPINGS, LABEL_CHARS,
                    MAX_CHART_GROUPS, MAX_POSITIONS, OTHER_COLOURS, RANGES, SOURCES, SPEED_COLOUR, SPEEDUP_COLOUR,
                    accepted_length_distribution, chart_groups, chart_labels, csv_row, drafter_of_group, group_cells,
                    group_colours, group_to_json, local_day_start, pair_choices, reading_order, run_to_json,
                    run_tooltip, short_label, time_axis_ticks)
from .window import DashboardWindow, SortItem, SummaryCard

__all__ = ["ALL_TIME", "BENCH_DEVICE_USER", "CHART_FILES", "CSV_COLUMNS", "CUSTOM_DATES", "DEFAULT_BENCH_PROMPTS",
           "DEFAULT_BENCH_TOKENS", "GROUP_COLUMNS", "GROUPINGS", "LABEL_CHARS", "MAX_CHART_GROUPS", "MAX_POSITIONS",
           "OTHER_COLOURS", "RANGES",
           "SOURCES", "SPEED_COLOUR", "SPEEDUP_COLOUR", "BenchmarkDialog", "BenchmarkHost", "BenchmarkProgress",
           "BenchmarkRun", "ChartView", "DashboardWindow", "GroupBarsChart", "GroupsChart", "SortItem", "SummaryCard",
           "TimelineChart", "accepted_length_distribution", "benchmark_modes", "chart_groups", "chart_labels",
           "csv_row", "drafter_of_group", "group_cells", "group_colours", "group_to_json",
           "local_day_start", "pair_choices", "reading_order", "run_to_json", "run_tooltip", "short_label",
           "time_axis_ticks"]
