"""The one size formatter and the one duration formatter (specchat/core/formatting.py), as the Models dialog, the
downloads, `specchat models catalog` and the dashboard show them."""

from specchat.core.formatting import format_duration, format_size
from specchat.models.catalog.entries import Fit
from specchat.models.hub.snapshots import DownloadCancelled


def test_sizes_are_decimal_units():
    assert [format_size(n) for n in (512, 1_000, 120_000_000, 3_400_000_000, 1_000_000, 14_200_000_000, 2**30)] == \
        ["512 bytes", "1 kB", "120 MB", "3.4 GB", "1.0 MB", "14 GB", "1.1 GB"]


def test_memory_verdicts_and_downloads_say_sizes_alike():
    """The catalog's memory figures and the downloads' messages use one unit convention."""
    fit = Fit("fits", 3_400_000_000, 8 * 2**30, "bf16", 4096)
    assert fit.explain() == "fits: needs 3.4 GB at bf16 with a 4096-token context, 8.6 GB available"
    assert str(DownloadCancelled(120_000_000)).startswith("Cancelled: 120 MB kept")


def test_measured_durations_and_estimates():
    assert [format_duration(s) for s in (0.4, 12.34, 192, 3900)] == ["0.4 s", "12.3 s", "3 min 12 s", "1 h 5 min"]
    assert [format_duration(s, estimate=True) for s in (0.2, 12.4, 100, 192, 3900, 7199)] == \
        ["1 s", "12 s", "2 min", "3 min", "1 h 5 min", "2 h 0 min"]
