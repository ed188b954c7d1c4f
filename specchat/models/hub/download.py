"""Downloading a model the user asked for, and what a failed download means in words the user can act on: the one
entry to the network (snapshots.py fetches a repository's files, gguf_files.py one GGUF file)."""

from __future__ import annotations

from ...core.errors import ModelLoadError, first_line
from ..sources import ModelSource


def download_from_hub(repo_id: str, on_progress=None, cancel=None) -> str:
    """Downloads a Hub model (safetensors, config and tokenizer files only) into the standard HF cache and returns
    its folder, or, given "org/name/file.gguf", that one GGUF file and its path (gguf_files.py); the one call in
    specchat that reaches the network, and only from the calling thread (snapshots.py). on_progress(Progress)
    follows it (None: a bar on the terminal); setting `cancel` stops it at the next chunk with DownloadCancelled,
    keeping what arrived for the next call to continue."""
    from ..catalog.quants import split_gguf_spec
    from .gguf_files import download_gguf_spec
    from .snapshots import (DownloadCancelled, download_snapshot, hub_endpoint, network_for_this_thread,
                            terminal_progress)

    one_gguf = split_gguf_spec(repo_id) is not None  # "org/name/file.gguf": that one file
    if not one_gguf:
        ModelSource._hub(repo_id)
    fetch = download_gguf_spec if one_gguf else download_snapshot
    try:
        with network_for_this_thread():
            if on_progress is not None:
                return str(fetch(repo_id, on_progress, cancel))
            with terminal_progress(repo_id) as report:
                return str(fetch(repo_id, report, cancel))
    except (DownloadCancelled, ModelLoadError):
        raise
    except Exception as error:
        raise ModelLoadError(_download_failure(repo_id, error, hub_endpoint())) from error


def _download_failure(repo_id: str, error: Exception, endpoint: str) -> str:
    """What went wrong, in words a user can act on (no traceback: these are not bugs)."""
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

    message = first_line(error)
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, GatedRepoError) or status == 403:
        return (f"{repo_id} is gated: accept its licence on {endpoint}/{repo_id} while logged in, then log in here "
                "with `hf auth login`, and download again")
    if isinstance(error, RepositoryNotFoundError) or status in (401, 404):
        return (f"{repo_id} was not found on {endpoint} (check the id; a private model needs `hf auth login`): "
                f"{message}")
    if isinstance(error, HfHubHTTPError):
        return f"could not download {repo_id}: the Hub answered {status}: {message}"
    if isinstance(error, OfflineModeIsEnabled) or any(
            word in message.lower() for word in ("connect", "resolve", "network", "offline", "timed out")) \
            or type(error).__name__.endswith(("Timeout", "TimeoutException", "ConnectError", "NetworkError")):
        return f"could not reach the Hugging Face Hub at {endpoint} to download {repo_id} (are you offline?): {message}"
    if isinstance(error, OSError):
        return f"could not save {repo_id} to the Hugging Face cache: {message}"
    return f"could not download {repo_id}: {message}"
