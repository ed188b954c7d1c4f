"""The remote engine against real `specchat serve` processes: the fixtures of tests/server_fixtures.py."""

from server_fixtures import *  # noqa: F401,F403
