"""The one place that says where specchat keeps its files: the cache (conversions, metadata, kernel verdicts, cost
curves, fetched wheels, training work), the data folder (the chat database) and the models folder (the offline
pair, downloaded GGUF files). Each can be moved with an environment variable (tests, portable installs, another
disk); else it is the platform's own folder, found by platformdirs, imported only when needed (it costs startup
time). Nothing here creates a folder.
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "specchat"
CACHE_DIR_ENV = "SPECCHAT_CACHE_DIR"
DATA_DIR_ENV = "SPECCHAT_DATA_DIR"
MODELS_DIR_ENV = "SPECCHAT_MODELS_DIR"


def cache_dir() -> Path:
    """The user cache folder: $SPECCHAT_CACHE_DIR, else the platform's (platformdirs' user_cache_dir("specchat"))."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME))


def cache_file(name: str) -> Path:
    """A file or folder `name` in the user cache folder (cache_dir())."""
    return cache_dir() / name


def data_dir() -> Path:
    """The user data folder, where the chat history lives: $SPECCHAT_DATA_DIR, else the platform's (platformdirs'
    user_data_dir("specchat"))."""
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME))


def models_dir() -> Path:
    """The models folder: $SPECCHAT_MODELS_DIR (a leading ~ expanded), else <the platform's user data folder>/models.
    $SPECCHAT_DATA_DIR does not move it: that variable moves the chat history only."""
    override = os.environ.get(MODELS_DIR_ENV)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME)) / "models"
