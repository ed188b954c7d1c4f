"""A hostile Hub mirror (HF_ENDPOINT) cannot make a download write outside the cache.

The fake Hub is a real HTTP server on 127.0.0.1 that lists a repository with whatever commit sha, blob ids and file
names a test gives, and serves bytes for any file it is asked for, so that a value that slipped through would be
written. Each case: the download stops with UnsafeHubAnswer (a message naming the value and saying nothing was
downloaded), no file is fetched, and nothing appears anywhere under the test's folder outside the cache's model
folder. A well-formed repository still downloads.

A mirror that sends more bytes than it listed is cut off as soon as they arrive, and the oversized unfinished file is
deleted. A link planted in the cache (at an unfinished file, a blob, the staging file of refs/main; a hard link) is
never written through: a file outside the cache keeps its bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest
from hub_cache import offline_hf_cache
from huggingface_hub import constants
from local_http import send, send_file_head, serve_get, stop_server

from specchat.core.errors import ModelLoadError
from specchat.models.hub.snapshots import (UnsafeHubAnswer, check_file_name, download_snapshot, inside,
                                           network_for_this_thread, repo_folder)

REPO = "org/model"
GOOD_COMMIT = "0123456789abcdef0123456789abcdef01234567"
WEIGHTS = b"w" * 1000
CONFIG = b'{"model_type": "x"}'


def git_blob(content: bytes) -> str:
    return hashlib.sha1(f"blob {len(content)}\0".encode() + content).hexdigest()


class HostileHub:
    """GET /api/models/<id>: `listing` as JSON; GET any other path: 200 with a file's bytes (the path recorded)."""

    def __init__(self, listing: dict):
        self.listing, self.fetched = listing, []
        self.weights_answer = None  # answer(handler) for the weights instead of their bytes
        self.server, self.url = serve_get(self.answer)

    def answer(self, handler) -> None:
        if handler.path.split("?")[0].startswith("/api/models/"):
            body = json.dumps(self.listing).encode()
        else:
            self.fetched.append(handler.path)
            if self.weights_answer is not None and not handler.path.endswith("/config.json"):
                return self.weights_answer(handler)
            body = CONFIG if handler.path.endswith("/config.json") else WEIGHTS
        send(handler, 200, body, {"Content-Type": "application/json"})

    def close(self) -> None:
        stop_server(self.server)


def listing(sha=GOOD_COMMIT, weights_name="model.safetensors", weights_blob=None, config_name="config.json",
            config_blob=None) -> dict:
    weights = {"rfilename": weights_name, "size": len(WEIGHTS), "blobId": git_blob(WEIGHTS),
               "lfs": {"sha256": weights_blob or hashlib.sha256(WEIGHTS).hexdigest(), "size": len(WEIGHTS),
                       "pointerSize": 134}}
    config = {"rfilename": config_name, "size": len(CONFIG), "blobId": config_blob or git_blob(CONFIG)}
    return {"id": REPO, "sha": sha, "siblings": [weights, config]}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    return offline_hf_cache(tmp_path, monkeypatch)


@pytest.fixture
def serve(cache, monkeypatch):
    hubs = []

    def start(answer: dict) -> HostileHub:
        hub = HostileHub(answer)
        hubs.append(hub)
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)
        return hub

    yield start
    for hub in hubs:
        hub.close()


def files_outside_the_model_folder(tmp_path: Path) -> list[str]:
    model = repo_folder(REPO)
    return sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*")
                  if not path.is_dir() and not path.is_relative_to(model) and ".locks" not in path.parts)


def download_refused(hub: HostileHub, tmp_path: Path) -> str:
    with network_for_this_thread(), pytest.raises(UnsafeHubAnswer) as refused:
        download_snapshot(REPO)
    message = str(refused.value)
    assert "\n" not in message and len(message) < 400
    assert hub.fetched == []  # not one file was fetched
    assert files_outside_the_model_folder(tmp_path) == []
    assert not (repo_folder(REPO) / "refs" / "main").exists()
    return message


@pytest.mark.parametrize("sha", [
    "/tmp/specchat-hostile-commit",  # an absolute path: the snapshot's pointers would be made there
    "../../../../outside",
    "..",
    "0123456789abcdef0123456789abcdef0123456",  # 39 digits
    "0123456789ABCDEF0123456789ABCDEF01234567",  # not as the Hub writes them (huggingface_hub refuses it too)
    "0123456789abcdef0123456789abcdef01234567/..",
    12345,
    None,
])
def test_a_commit_that_is_not_a_sha_is_refused(serve, tmp_path, sha):
    hub = serve(listing(sha=sha))
    message = download_refused(hub, tmp_path)
    assert "commit" in message and "nothing was downloaded" in message
    assert not Path("/tmp/specchat-hostile-commit").exists()


@pytest.mark.parametrize("field, blob", [
    ("weights_blob", "../../../../outside-weights"),
    ("weights_blob", "/tmp/specchat-hostile-blob"),
    ("weights_blob", git_blob(WEIGHTS)),  # a sha1 where an LFS sha256 belongs
    ("config_blob", "../" + "0" * 40),
    ("config_blob", hashlib.sha256(CONFIG).hexdigest()),  # a sha256 where a git blob id belongs
    ("config_blob", "g" * 40),
])
def test_a_blob_id_that_is_not_a_checksum_is_refused(serve, tmp_path, field, blob):
    hub = serve(listing(**{field: blob}))
    message = download_refused(hub, tmp_path)
    assert "checksum" in message and "nothing was downloaded" in message
    assert not Path("/tmp/specchat-hostile-blob").exists()


@pytest.mark.parametrize("name", [
    "..\\..\\..\\evil.json",  # a separator on Windows
    "C:evil.json",  # a drive-relative path on Windows
    "evil.json:stream.json",  # an alternate data stream
    "evil\x00.json",
    "evil\n.json",
    " evil.json",
    "x" * 300 + ".json",
])
def test_a_file_name_that_could_leave_the_folder_is_refused(serve, tmp_path, name):
    hub = serve(listing(config_name=name))
    message = download_refused(hub, tmp_path)
    assert "nothing was downloaded" in message and "listed" in message


def test_names_in_subfolders_or_of_other_kinds_are_never_fetched(serve, tmp_path):
    answer = listing()
    for name in ("../../evil.json", "/etc/evil.json", "sub/../../evil.json", "model.bin", "..", "evil.sh"):
        answer["siblings"].append({"rfilename": name, "size": 3, "blobId": git_blob(b"bad")})
    hub = serve(answer)
    with network_for_this_thread():
        snapshot = download_snapshot(REPO)
    assert sorted(p.name for p in snapshot.iterdir()) == ["config.json", "model.safetensors"]
    assert sorted(path.rsplit("/", 1)[-1] for path in hub.fetched) == ["config.json", "model.safetensors"]
    assert (snapshot / "model.safetensors").read_bytes() == WEIGHTS
    assert files_outside_the_model_folder(tmp_path) == []


def test_a_snapshot_folder_that_links_outside_the_cache_is_refused(serve, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    snapshots = repo_folder(REPO) / "snapshots"
    snapshots.mkdir(parents=True)
    os.symlink(outside, snapshots / GOOD_COMMIT)  # as if planted earlier: the pointers would land outside
    hub = serve(listing())
    with network_for_this_thread(), pytest.raises(UnsafeHubAnswer, match="outside the model's cache folder"):
        download_snapshot(REPO)
    assert list(outside.iterdir()) == [] and hub.fetched == []


def test_the_checks_themselves():
    folder = Path("/cache/models--org--model")
    assert inside(folder, folder / "blobs" / ("a" * 64)) == folder / "blobs" / ("a" * 64)
    for path in (folder / ".." / "x", Path("/etc/passwd"), folder, folder / "snapshots" / ".."):
        with pytest.raises(UnsafeHubAnswer):
            inside(folder, path)
    assert check_file_name("model-00001-of-00002.safetensors", REPO) == "model-00001-of-00002.safetensors"
    assert check_file_name("model.Q4_K_M.gguf", REPO, ("*.gguf",)) == "model.Q4_K_M.gguf"
    assert check_file_name("q4/model.Q4_K_M.gguf", REPO, ("*.gguf",)) == "q4/model.Q4_K_M.gguf"  # a subfolder
    for name in ("q4/../../x.gguf", "/etc/x.gguf", "q4//x.gguf", "./x.gguf", "q4\\..\\x.gguf", "q4/ x.gguf"):
        with pytest.raises(UnsafeHubAnswer, match="outside the model's folder"):
            check_file_name(name, REPO, ("*.gguf",))
    with pytest.raises(UnsafeHubAnswer, match="not one of the kinds"):
        check_file_name("model.gguf", REPO)
    with pytest.raises(ModelLoadError, match="not a Hub model id"):
        repo_folder("../../etc")


# --- more than listed; links planted in the cache ----------------------------------------------------------------

FLOOD_BYTES = 64 << 20


def test_a_file_larger_than_listed_is_cut_off_and_deleted(serve, tmp_path):
    hub = serve(listing())  # the weights are listed with 1,000 bytes
    sent, finished = [0], threading.Event()

    def flood(handler):  # 64 MB, announced as such, until the client hangs up
        handler.send_response(200)
        handler.send_header("Content-Length", str(FLOOD_BYTES))
        handler.end_headers()
        block = b"w" * (256 << 10)
        try:
            while sent[0] < FLOOD_BYTES:
                handler.wfile.write(block)
                sent[0] += len(block)
        finally:
            finished.set()

    hub.weights_answer = flood
    with network_for_this_thread(), pytest.raises(ModelLoadError, match="more than the 1000 bytes") as refused:
        download_snapshot(REPO)
    assert "\n" not in str(refused.value)
    assert finished.wait(60)  # the server's write failed: the client hung up
    assert sent[0] < FLOOD_BYTES  # what reached the client's buffers, not the 64 MB
    blobs = repo_folder(REPO) / "blobs"
    assert [path.name for path in blobs.iterdir()] == []  # the oversized .incomplete is gone
    assert not (repo_folder(REPO) / "refs" / "main").exists()


def weights_sha() -> str:
    return hashlib.sha256(WEIGHTS).hexdigest()


@pytest.mark.parametrize("planted, victim_bytes", [
    ("partial", b"precious"),  # blobs/<sha>.incomplete -> a file outside: it would be written through
    ("blob", b"v" * len(WEIGHTS)),  # blobs/<sha> -> a file of the listed size: it would be kept as the weights
])
def test_a_symbolic_link_planted_in_the_cache_is_refused(serve, tmp_path, planted, victim_bytes):
    victim = tmp_path / "outside.bin"
    victim.write_bytes(victim_bytes)
    blobs = repo_folder(REPO) / "blobs"
    blobs.mkdir(parents=True)
    os.symlink(victim, blobs / (weights_sha() + (".incomplete" if planted == "partial" else "")))
    hub = serve(listing())
    with network_for_this_thread(), pytest.raises(UnsafeHubAnswer, match="is a link") as refused:
        download_snapshot(REPO)
    assert "nothing was written through it" in str(refused.value)
    assert victim.read_bytes() == victim_bytes  # untouched
    assert not any(path.endswith("/model.safetensors") for path in hub.fetched)
    assert not (repo_folder(REPO) / "refs" / "main").exists()


def test_a_hard_link_or_a_link_at_the_staging_name_is_never_written_through(serve, tmp_path):
    victim = tmp_path / "outside.bin"
    victim.write_bytes(b"precious")
    folder = repo_folder(REPO)
    (folder / "blobs").mkdir(parents=True)
    (folder / "refs").mkdir()
    os.link(victim, folder / "blobs" / (weights_sha() + ".incomplete"))  # another name of the outside file
    os.symlink(victim, folder / "refs" / f".main.{os.getpid()}.tmp")  # where refs/main is staged
    serve(listing())
    with network_for_this_thread():
        snapshot = download_snapshot(REPO)
    assert (snapshot / "model.safetensors").read_bytes() == WEIGHTS
    assert (folder / "refs" / "main").read_text() == GOOD_COMMIT and not (folder / "refs" / "main").is_symlink()
    assert victim.read_bytes() == b"precious"


def test_a_partial_file_with_other_names_is_not_appended_to(serve, tmp_path):
    victim = tmp_path / "outside.bin"
    victim.write_bytes(WEIGHTS[:10])  # looks like the start of the weights
    blobs = repo_folder(REPO) / "blobs"
    blobs.mkdir(parents=True)
    os.link(victim, blobs / (weights_sha() + ".incomplete"))
    hub = serve(listing())

    def resume(handler):  # a mirror that continues the file from the Range asked for
        start = send_file_head(handler, WEIGHTS)
        handler.wfile.write(WEIGHTS[start:])

    hub.weights_answer = resume
    with network_for_this_thread(), pytest.raises(UnsafeHubAnswer, match="is a link"):
        download_snapshot(REPO)
    assert victim.read_bytes() == WEIGHTS[:10]
