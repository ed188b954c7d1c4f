"""Schema revisions, oldest first: 0001_initial, 0002_speedup_basis."""
