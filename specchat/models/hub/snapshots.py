"""Downloading a Hub model into the Hugging Face cache, resumably, and the one door specchat opens to the network.

specchat runs with HF_HUB_OFFLINE=1 (cli.py), which huggingface_hub reads once, at import, into
`constants.HF_HUB_OFFLINE`; its HTTP client refuses every request while that flag is true (utils/_http.py,
`hf_request_event_hook`). `network_for_this_thread` makes the flag false for the calling thread only, for as long
as the download the user asked for runs, and puts the plain flag back after: a request from any other thread (a
model load, a tokenizer lookup) is still refused while a download streams.

Why not `snapshot_download`: it downloads each file into a temporary file unique to that attempt and deletes it
when the attempt fails (file_download.py, `_download_to_tmp_and_move`), so a cancelled download starts that file
from zero the next time (for a model of one 3.4 GB file, everything); and it fetches files on a thread pool of its
own (and hf_xet's native threads), which a per-thread switch cannot follow. Here every request runs on the calling
thread, and a file's bytes go to `blobs/<blob>.incomplete` in the model's cache folder, kept across attempts and
continued with an HTTP Range request. Files the Hub stores with Xet come over plain HTTP too, from their resolve
URL, as huggingface_hub itself fetches them when hf_xet is not installed. The result is the cache layout
huggingface_hub writes (blobs, snapshots/<commit> linking to them, refs/main written last), so
`snapshot_download(local_files_only=True)` and `scan_cache_dir` find it, and a model counts as downloaded only once
every file is in place.

What the Hub answers is untrusted (HF_ENDPOINT may name any mirror): the commit sha, each blob id and each file name
become path parts, so each is checked first (check_commit, check_blob, check_file_name; huggingface_hub checks its
commits the same way), and every path written, linked or renamed must resolve inside the model's cache folder
(`inside`). A hostile value stops the download with UnsafeHubAnswer before anything is written.

What is already in the cache is not trusted either (a shared HF_HOME): a link planted at a blob or an unfinished
file is refused, never written through or kept (O_NOFOLLOW, `refuse_link`). A file is written only up to the size the
Hub listed: a server that sends more is cut off at once and the unfinished file deleted.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import hashlib
import os
import re
import shutil
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...core.errors import ModelLoadError, SpecchatError
from ...core.formatting import format_size
from ...core.fs import atomic_write_text, check_disk_space, hash_file

# What a model folder needs: config, tokenizer, chat template and safetensors weights (never pickled weights).
FILE_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.txt", "*.py", "*.tiktoken", "*.jinja")
CHUNK_BYTES = 256 * 1024  # a cancel is seen within one chunk
PARTIAL_SUFFIX = ".incomplete"
_PARTIAL_NAME = re.compile(r"^[0-9a-f]{40,64}\.incomplete$")  # ours: the blob's name, then the suffix
# What the Hub's API may give as path parts, checked before any is used (a hostile HF_ENDPOINT mirror could send
# "/etc" as a commit or "../../x" as a blob id): a commit is 40 hex digits, as huggingface_hub's REGEX_COMMIT_HASH;
# a blob is the git blob id (sha1, 40 hex digits) or the LFS sha256 (64).
COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
BLOB_ID = {False: re.compile(r"[0-9a-f]{40}"), True: re.compile(r"[0-9a-f]{64}")}
_UNSAFE_IN_NAME = re.compile(r"[\\/:\x00-\x1f\x7f]")  # in one part: separators, drive letters, control characters
MAX_NAME_CHARS = 255


class DownloadCancelled(SpecchatError):
    """The user cancelled; what was downloaded stays on disk for the next try."""

    def __init__(self, kept_bytes: int):
        super().__init__(f"Cancelled: {format_size(kept_bytes)} kept, the next download resumes.")
        self.kept_bytes = kept_bytes


@dataclass(frozen=True)
class HubFile:
    name: str  # the path in the repository
    size: int
    blob: str  # its name in the cache's blobs folder: the LFS sha256, else the git blob id (as huggingface_hub)
    lfs: bool


@dataclass(frozen=True)
class Progress:
    """One report from a running download: bytes on disk of the whole model, and what arrived this time."""

    done_bytes: int
    total_bytes: int
    received_bytes: int  # over the network since this download started (a resumed part is not counted)
    file: str  # the file being fetched or checked
    phase: str = "downloading"  # or "checking" (the checksum of a finished file)


# --- the network switch ---------------------------------------------------------------------------------------------

class _OfflineExceptDownloads:
    """Stands in for huggingface_hub.constants.HF_HUB_OFFLINE while a download runs: true (offline) in every
    thread except those downloading at the user's request. huggingface_hub only ever tests the flag for truth."""

    def __init__(self, offline: bool, telemetry_disabled: bool):
        self.offline = offline
        self.telemetry_disabled = telemetry_disabled  # huggingface_hub's own setting, put back with the flag
        self.threads: set[int] = set()

    def __bool__(self) -> bool:
        return self.offline and threading.get_ident() not in self.threads

    def __repr__(self) -> str:
        return f"<HF_HUB_OFFLINE={self.offline}, lifted for {len(self.threads)} download thread(s)>"


_switch_lock = threading.Lock()


@contextlib.contextmanager
def network_for_this_thread():
    """Lets the calling thread reach the Hub until the block ends, and no other thread; nested and concurrent
    uses are counted, and the last one out restores huggingface_hub's own flags.

    Telemetry stays off meanwhile: with it on, huggingface_hub's user-agent header asks the Hub for a list of AI
    agents to detect (utils/_detect_agent.py, GET /api/agent-harnesses), a request the download does not need."""
    from huggingface_hub import constants

    me = threading.get_ident()
    with _switch_lock:
        switch = constants.HF_HUB_OFFLINE
        if not isinstance(switch, _OfflineExceptDownloads):
            switch = _OfflineExceptDownloads(bool(switch), constants.HF_HUB_DISABLE_TELEMETRY)
            constants.HF_HUB_OFFLINE = switch
            constants.HF_HUB_DISABLE_TELEMETRY = True
        already_open = me in switch.threads
        switch.threads.add(me)
    try:
        yield
    finally:
        with _switch_lock:
            if not already_open:
                switch.threads.discard(me)
            if not switch.threads and constants.HF_HUB_OFFLINE is switch:
                constants.HF_HUB_OFFLINE = switch.offline
                constants.HF_HUB_DISABLE_TELEMETRY = switch.telemetry_disabled


def hub_endpoint() -> str:
    """Where downloads go: https://huggingface.co, or HF_ENDPOINT (a mirror), read when asked."""
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


# --- the cache ------------------------------------------------------------------------------------------------------

def repo_folder(repo_id: str) -> Path:
    """The model's folder in the Hugging Face cache (HF_HOME/hub/models--org--name); ModelLoadError for a repo id
    that is not one (huggingface_hub's own rules: "org/name", no "..", no "--", no separators)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise ModelLoadError(f"{repo_id!r} is not a Hub model id: {error}") from None
    return Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")


# --- what the Hub says, checked -------------------------------------------------------------------------------------

class UnsafeHubAnswer(ModelLoadError):
    """The Hub (or the mirror in HF_ENDPOINT) answered with a value that cannot be used as a path, or the cache
    holds a link where the download would write: nothing is written there."""


def check_commit(commit: object, repo_id: str) -> str:
    """The commit sha the Hub gave, if it is one (40 lowercase hex digits); UnsafeHubAnswer otherwise. It names a
    folder (snapshots/<commit>) and goes in refs/main, so nothing else may pass."""
    if not isinstance(commit, str) or not COMMIT_SHA.fullmatch(commit):
        raise UnsafeHubAnswer(f"the Hub at {hub_endpoint()} gave {_shown(commit)} as the commit of {repo_id}, which "
                              "is not a commit sha (40 hex digits); nothing was downloaded")
    return commit


def check_blob(blob: object, lfs: bool, repo_id: str, name: str) -> str:
    """A file's blob id as the Hub gave it, if it is one: the LFS sha256 (64 hex digits) of a weights file or the
    git blob id (a sha1, 40) of a small one. It names the file in blobs/, so nothing else may pass."""
    if not isinstance(blob, str) or not BLOB_ID[lfs].fullmatch(blob):
        kind = "an LFS sha256 (64 hex digits)" if lfs else "a git blob id (40 hex digits)"
        raise UnsafeHubAnswer(f"the Hub at {hub_endpoint()} gave {_shown(blob)} as the checksum of {repo_id}/"
                              f"{_shown(name, quoted=False)}, which is not {kind}; nothing was downloaded")
    return blob


def check_file_name(name: object, repo_id: str, patterns: tuple[str, ...] = FILE_PATTERNS) -> str:
    """A file's path in the repository as the Hub listed it, if it is safe inside the snapshot folder: parts
    separated by "/" (a model folder's files have one; a single-file download may sit in a subfolder), each part
    not empty, not "." or "..", with no other separator (\\), no drive letter or stream (":"), no control
    character, no space at either end, at most 255 characters; the name ending as one of `patterns`.
    UnsafeHubAnswer otherwise."""
    problem = None
    parts = name.split("/") if isinstance(name, str) else []
    if not parts or not name:
        problem = "is not a file name"
    elif any(len(part) > MAX_NAME_CHARS for part in parts):
        problem = f"has a part longer than {MAX_NAME_CHARS} characters"
    elif any(part in ("", ".", "..") or _UNSAFE_IN_NAME.search(part) or part != part.strip() for part in parts):
        problem = "could reach outside the model's folder (an absolute path, '..', a drive, a control character)"
    elif not any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
        problem = f"is not one of the kinds of file specchat downloads ({', '.join(patterns)})"
    if problem is not None:
        raise UnsafeHubAnswer(f"the Hub at {hub_endpoint()} listed {_shown(name)} in {repo_id}, which {problem}; "
                              "nothing was downloaded")
    return name


def inside(root: Path, path: Path) -> Path:
    """`path` (its folder resolved, links followed; its last part as it is), if that lies under `root` (also
    resolved); UnsafeHubAnswer otherwise. Every file a download writes, links or renames is checked so."""
    base = Path(os.path.realpath(root))
    resolved = Path(os.path.realpath(path.parent)) / path.name
    if path.name in ("", ".", "..") or not resolved.is_relative_to(base) or resolved == base:
        raise UnsafeHubAnswer(f"refusing to write {path}: it lies outside the model's cache folder {base}")
    return resolved


def refuse_link(path: Path) -> None:
    """UnsafeHubAnswer when `path` is a symbolic link: a download never writes through, or keeps as a blob, a link
    someone planted in the cache (a shared HF_HOME), which could lead to any file the user can write."""
    if os.path.islink(path):
        raise _linked(path)


def _linked(path: Path) -> UnsafeHubAnswer:
    return UnsafeHubAnswer(f"refusing to write {path}: it is a link (symbolic, or a file with other names) that "
                           "could lead outside the model's cache folder; nothing was written through it")


def _shown(value: object, quoted: bool = True) -> str:
    """A value from the network in a message: repr'd (control characters visible) and at most 80 characters."""
    text = repr(value) if quoted or not isinstance(value, str) else repr(value)[1:-1]
    return text if len(text) <= 80 else text[:77] + "..."


def cached_snapshot(repo_id: str) -> Path | None:
    """The downloaded snapshot's folder, found without the network as loading finds it; None if not downloaded."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # not downloaded, or an unreadable cache: either way nothing to load
        return None


def downloaded_models() -> dict[str, Path]:
    """{Hub id: snapshot folder} of every model complete in the cache (no network; read at each call, as
    snapshot_download reads the cache's location)."""
    found = {}
    for repo_id in cached_repo_ids():
        snapshot = cached_snapshot(repo_id)
        if snapshot is not None:
            found[repo_id] = snapshot
    return found


def cached_repo_ids() -> list[str]:
    """The Hub ids of every model folder in the Hugging Face cache, finished or not, sorted (no network)."""
    from huggingface_hub import constants

    return [folder.name.removeprefix("models--").replace("--", "/", 1)
            for folder in sorted(Path(constants.HF_HUB_CACHE).glob("models--*--*"))]


def arrived_bytes(repo_id: str) -> int:
    """Bytes a model's download has written to the cache so far, finished files and unfinished ones (kept_bytes
    counts the unfinished only); 0 for a folder whose name is no valid id."""
    try:
        return sum(entry.stat().st_size for entry in (repo_folder(repo_id) / "blobs").iterdir() if entry.is_file())
    except (OSError, ModelLoadError):  # no blobs folder: nothing arrived
        return 0


def kept_bytes(repo_id: str) -> int:
    """Bytes of unfinished files a cancelled or broken download left for the next one to continue."""
    blobs = repo_folder(repo_id) / "blobs"
    try:
        return sum(entry.stat().st_size for entry in blobs.iterdir() if _PARTIAL_NAME.match(entry.name))
    except OSError:
        return 0


# --- downloading ----------------------------------------------------------------------------------------------------

def wanted(names: list[str]) -> list[str]:
    """The files of a repository a model folder needs: top-level files only (transformers reads the folder's top
    level; subfolders hold other formats, e.g. ONNX or the original checkpoint), matching FILE_PATTERNS. A name is
    only chosen here; check_file_name decides whether it is safe to write."""
    return [name for name in names if isinstance(name, str) and "/" not in name
            and any(fnmatch.fnmatchcase(name, pattern) for pattern in FILE_PATTERNS)]


def plan(repo_id: str) -> tuple[str, list[HubFile]]:
    """The commit `main` points at and the files to fetch, with their sizes and checksums (one Hub request)."""
    from huggingface_hub import HfApi, constants

    info = HfApi(endpoint=hub_endpoint()).model_info(repo_id, files_metadata=True,
                                                     timeout=constants.HF_HUB_ETAG_TIMEOUT)
    commit = check_commit(info.sha, repo_id)
    siblings = {sibling.rfilename: sibling for sibling in info.siblings or [] if isinstance(sibling.rfilename, str)}
    files = []
    for name in wanted(sorted(siblings)):
        sibling = siblings[check_file_name(name, repo_id)]
        lfs = sibling.lfs is not None
        blob = sibling.lfs.sha256 if lfs else sibling.blob_id
        size = sibling.lfs.size if lfs else sibling.size
        if blob is None or size is None:
            raise ModelLoadError(f"the Hub gave no size or checksum for {repo_id}/{name}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise UnsafeHubAnswer(f"the Hub gave {_shown(size)} as the size of {repo_id}/{name}; nothing was "
                                  "downloaded")
        files.append(HubFile(name, size, check_blob(blob, lfs, repo_id, name), lfs))
    if not any(file.name.endswith(".safetensors") for file in files):
        raise ModelLoadError(f"{repo_id} publishes no safetensors weights, and specchat does not download pickled "
                             "(.bin) weights, which can run code when loaded")
    return commit, files


def download_snapshot(repo_id: str, on_progress: Callable[[Progress], None] | None = None,
                      cancel: threading.Event | None = None) -> Path:
    """Downloads the model's files into the cache, continuing any file an earlier try left unfinished, and returns
    the snapshot folder. Call it inside network_for_this_thread(); raises DownloadCancelled when `cancel` is set
    (checked between chunks), and huggingface_hub's or httpx's errors otherwise."""
    commit, files = plan(repo_id)
    folder = repo_folder(repo_id)
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    # where huggingface_hub keeps its own locks (scans skip it)
    with download_lock(folder.parent / ".locks" / folder.name, repo_id):
        return _download_files(repo_id, folder, commit, files, on_progress or (lambda progress: None), cancel)


@contextlib.contextmanager
def download_lock(locks: Path, repo_id: str):
    """One download of a repository at a time, across specchat processes: a lock file in the folder `locks`;
    ModelLoadError at once when another process holds it."""
    from filelock import FileLock, Timeout

    locks.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(locks / "specchat-download.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ModelLoadError(f"{repo_id} is being downloaded by another specchat already") from None
    try:
        yield
    finally:
        lock.release()


def _download_files(repo_id: str, folder: Path, commit: str, files: list[HubFile],
                    on_progress: Callable[[Progress], None], cancel: threading.Event | None) -> Path:
    snapshot = inside(folder, folder / "snapshots" / check_commit(commit, repo_id))
    for file in files:  # every path this download touches, before the first byte is written
        check_file_name(file.name, repo_id, ("*",))  # its kind was chosen by the caller (plan: FILE_PATTERNS)
        check_blob(file.blob, file.lfs, repo_id, file.name)
        for path in (snapshot / file.name, folder / "blobs" / file.blob,
                     folder / "blobs" / (file.blob + PARTIAL_SUFFIX)):
            inside(folder, path)
    total = sum(file.size for file in files)
    missing = [file for file in files if not _in_snapshot(snapshot, file)]
    on_disk = total - sum(file.size for file in missing) + sum(partial_size(folder, file) for file in missing)
    check_disk_space({folder: total - on_disk}, not_enough_space)
    # The weights first: the small files then land within seconds of each other, so an interrupted download
    # rarely leaves a folder that looks complete without its weights (refs/main, written last, decides anyway).
    missing.sort(key=lambda file: -file.size)
    counter = ByteCounter(on_disk, total, on_progress, cancel)
    on_progress(Progress(on_disk, total, 0, missing[0].name if missing else ""))  # the size, and what is kept
    for file in missing:
        counter.file = file.name
        blob = folder / "blobs" / file.blob
        refuse_link(blob)
        if blob.is_file() and blob.stat().st_size == file.size:  # fetched before, for another revision
            counter.done += file.size - partial_size(folder, file)
        else:
            fetch_resuming(repo_id, commit, file, folder / "blobs" / (file.blob + PARTIAL_SUFFIX), counter)
        link_blob(inside(folder, blob), inside(folder, snapshot / file.name))
    atomic_write_text(inside(folder, folder / "refs" / "main"), commit)
    return snapshot


class ByteCounter:
    """Counts bytes as they arrive, reports them, and is where a cancel is noticed."""

    def __init__(self, on_disk: int, total: int, report: Callable[[Progress], None],
                 cancel: threading.Event | None):
        self.done, self.total, self.received = on_disk, total, 0
        self.report, self.cancel, self.file = report, cancel, ""

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise DownloadCancelled(self.kept())

    def kept(self) -> int:
        return self.done

    def add(self, count: int) -> None:
        self.done += count
        self.received += count
        self.report(Progress(self.done, self.total, self.received, self.file))

    def undo(self, count: int) -> None:
        """A partial file was dropped (the server would not continue it, or it arrived damaged)."""
        self.done -= count
        self.report(Progress(self.done, self.total, self.received, self.file))


TRANSIENT_ATTEMPTS = 3  # a connection that breaks after some bytes arrived is continued this many times


def fetch_resuming(repo_id: str, commit: str, file: HubFile, partial: Path, counter: ByteCounter) -> None:
    """Fetches one file into `partial`, continuing from what is there, checks its checksum, and renames it to
    its blob. A connection that breaks after bytes arrived is continued (a few times); one that fails at once is
    the caller's error (offline, refused). A link at the unfinished file or at the blob is refused (refuse_link)."""
    import httpx2

    refuse_link(partial.with_name(file.blob))  # the unfinished file is checked by each attempt (_fetch)
    for attempt in range(TRANSIENT_ATTEMPTS):
        before = partial_size(partial.parent.parent, file)
        try:
            _fetch(repo_id, commit, file, partial, counter)
            break
        except (httpx2.TransportError, httpx2.RemoteProtocolError):
            if attempt == TRANSIENT_ATTEMPTS - 1 or partial_size(partial.parent.parent, file) <= before:
                raise
            time.sleep(1)
    size = partial.stat().st_size
    if size != file.size:
        raise ModelLoadError(f"{file.name} arrived with {size} bytes instead of {file.size}; download again")
    counter.report(Progress(counter.done, counter.total, counter.received, file.name, "checking"))
    if _checksum(partial, file, counter) != file.blob:
        partial.unlink()
        counter.undo(size)
        raise ModelLoadError(f"{file.name} arrived damaged (its checksum does not match the Hub's), so it was "
                             "deleted; download again")
    os.replace(partial, partial.with_name(file.blob))


def _fetch(repo_id: str, commit: str, file: HubFile, partial: Path, counter: ByteCounter) -> None:
    from urllib.parse import quote

    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_stream_backoff

    refuse_link(partial)
    start = partial.stat().st_size if partial.is_file() else 0
    if start > file.size:  # not this file's bytes: start over
        partial.unlink()
        counter.undo(file.size)  # what the count took it for
        start = 0
    if start == file.size:
        return
    # identity: a Range counts bytes of the file itself, not of a compressed stream
    headers = {**build_hf_headers(), "Accept-Encoding": "identity"}
    if start:
        headers["Range"] = f"bytes={start}-"
    url = f"{hub_endpoint()}/{repo_id}/resolve/{commit}/{quote(file.name)}"
    counter.check_cancel()
    with http_stream_backoff("GET", url, headers=headers, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT,
                             retry_on_exceptions=(), retry_on_status_codes=(408, 429, 500, 502, 503, 504)) as response:
        hf_raise_for_status(response)
        if start and response.status_code != 206:  # the server sent the whole file: take it from the start
            counter.undo(start)
            start = 0
        _write_body(response, partial, start, file, counter)
    counter.check_cancel()


def _write_body(response, partial: Path, start: int, file: HubFile, counter: ByteCounter) -> None:
    """Appends the response's bytes to `partial` (which holds `start` bytes of the file), never past the size the
    Hub listed: the first chunk that would go beyond it ends the download, before it is written, and the unfinished
    file is deleted (ModelLoadError), so a hostile or broken server cannot fill the disk."""
    written = start
    with _open_partial(partial, append=bool(start)) as out:
        for chunk in response.iter_bytes(CHUNK_BYTES):
            counter.check_cancel()
            if written + len(chunk) > file.size:
                break
            out.write(chunk)
            written += len(chunk)
            counter.add(len(chunk))
        else:
            return
    partial.unlink()
    counter.undo(written)
    raise ModelLoadError(f"{file.name}: the server sent more than the {file.size} bytes the Hub listed, so the "
                         "download was stopped and the unfinished file deleted; download again")


def _open_partial(path: Path, append: bool):
    """The unfinished file, opened for writing without following a link: appended to (`append`), or made anew
    (an old one is removed first, never truncated, as a hard link would truncate its other names too). A symbolic
    link, or a file to append to that has other names (a hard link), is refused with UnsafeHubAnswer."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    if append:
        flags |= os.O_APPEND
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a link planted since the check is removed, not followed
        flags |= os.O_EXCL
    try:
        descriptor = os.open(path, flags, 0o666)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EEXIST, errno.EMLINK):  # a link, or one planted since the check
            raise _linked(path) from None
        raise
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(descriptor)
        raise _linked(path)
    return os.fdopen(descriptor, "ab" if append else "wb")


def _checksum(path: Path, file: HubFile, counter: ByteCounter) -> str:
    """The LFS sha256 of a weights file, or the git blob id (sha1 of "blob <size>\\0" + content) of a small one."""
    digest = hashlib.sha256() if file.lfs else hashlib.sha1(f"blob {file.size}\0".encode())
    return hash_file(path, digest, lambda size: counter.check_cancel())


def partial_size(folder: Path, file: HubFile) -> int:
    """How many bytes of `file` an earlier attempt left in folder/blobs/<blob>.incomplete (at most its size; 0 when
    there is none): what a download continues from and need not find disk space for."""
    partial = folder / "blobs" / (file.blob + PARTIAL_SUFFIX)
    try:
        return min(partial.stat().st_size, file.size)
    except OSError:
        return 0


def _in_snapshot(snapshot: Path, file: HubFile) -> bool:
    try:
        return (snapshot / file.name).stat().st_size == file.size  # follows the link to the blob
    except OSError:
        return False


def link_blob(blob: Path, pointer: Path) -> None:
    """snapshots/<commit>/<name> -> ../../blobs/<blob>, as huggingface_hub links them (a copy where the file
    system has no symbolic links)."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    try:
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    except OSError:
        shutil.copyfile(blob, pointer)


def not_enough_space(needed: int, folder: Path, free: int) -> ModelLoadError:
    """The error a download stops with, before its first byte, when the disk of `folder` (a model's cache folder, or
    a models folder's staging) has `free` bytes and it needs `needed` more (core.fs.check_disk_space's `refuse`)."""
    return ModelLoadError(f"not enough disk space: the download needs {format_size(needed)} more, and "
                          f"{folder.parent} has {format_size(free)} free")


@contextlib.contextmanager
def terminal_progress(repo_id: str):
    """A byte bar on stderr for `specchat models download`, drawn from the first report on (a download that
    fails before any byte arrives prints only its error)."""
    from tqdm.auto import tqdm

    bars = []

    def report(progress) -> None:
        if not bars:
            bars.append(tqdm(desc=repo_id, total=progress.total_bytes, initial=progress.done_bytes, unit="B",
                             unit_scale=True, unit_divisor=1000))
        bars[0].update(progress.done_bytes - bars[0].n)

    try:
        yield report
    finally:
        for bar in bars:
            bar.close()
