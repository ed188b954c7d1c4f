"""The window fixtures (tests/window_fixtures.py)."""

from window_fixtures import *  # noqa: F401,F403
