"""Real `specchat serve` processes on a tiny model: the fixtures live in tests/server_fixtures.py, shared with
tests/remote."""

from server_fixtures import *  # noqa: F401,F403
