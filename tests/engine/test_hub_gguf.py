"""Downloading one GGUF file (models/hub/gguf_files.py) from a local Hub on 127.0.0.1 (tests/gguf_hub.py): the file lands
in the Hugging Face cache's layout (or a models folder) and loads as a "gguf" ModelSource; a broken connection is
continued with a Range; a cancel keeps what arrived and the next download resumes it; a file whose sha256 is not
the listed one is deleted and nothing counts as downloaded; a file that is not the catalog's pin is refused before
any byte is fetched. No test reaches the internet."""

import hashlib
import os
import threading

import pytest
from gguf_hub import COMMIT, FakeGgufHub
from hub_cache import offline_hf_cache
from huggingface_hub import constants, scan_cache_dir

from specchat.core.errors import ModelLoadError
from specchat.models.catalog.quants import GgufQuant
from specchat.models.hub.gguf_files import cached_gguf, download_gguf
from specchat.models.hub.snapshots import DownloadCancelled, UnsafeHubAnswer, kept_bytes
from specchat.models.sources import ModelSource

REPO, FILE = "test-org/Tiny-GGUF", "tiny-q4_k_m.gguf"
SPEC = f"{REPO}/{FILE}"
CONTENT = b"GGUF" + os.urandom(3_000_000 - 4)  # the download never parses it: bytes, a size and a sha256


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A local Hub serving REPO, an empty Hugging Face cache and models folder of the test's own, and
    huggingface_hub offline as the app runs it."""
    offline_hf_cache(tmp_path, monkeypatch)
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "models"))
    server = FakeGgufHub()
    server.repos[REPO] = {FILE: CONTENT, "other-q8_0.gguf": b"GGUF-other", "README.md": b"# tiny"}
    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    yield server
    server.close()


def download(spec=SPEC, **kwargs):
    from specchat.models.hub.download import download_from_hub

    return download_from_hub(spec, on_progress=kwargs.pop("on_progress", lambda progress: None), **kwargs)


def test_one_file_lands_in_the_cache_and_loads_as_a_gguf_source(hub):
    with pytest.raises(ModelLoadError, match="is not downloaded yet"):
        ModelSource.parse(SPEC)
    path = download()
    sha256 = hashlib.sha256(CONTENT).hexdigest()
    assert path.endswith(f"models--test-org--Tiny-GGUF/snapshots/{COMMIT}/{FILE}")
    assert open(path, "rb").read() == CONTENT
    assert os.path.realpath(path).endswith(f"/blobs/{sha256}")
    assert [path for path, _range in hub.requests] == [f"/api/models/{REPO}/revision/main",
                                                       f"/{REPO}/resolve/{COMMIT}/{FILE}"]  # that one file only
    source = ModelSource.parse(SPEC)
    assert (source.kind, source.location) == ("gguf", path)
    assert cached_gguf(REPO, FILE) is not None and cached_gguf(REPO, "other-q8_0.gguf") is None
    assert constants.HF_HUB_OFFLINE is True  # the network switch is closed again
    scan = scan_cache_dir(constants.HF_HUB_CACHE)
    assert [repo.repo_id for repo in scan.repos] == [REPO] and not scan.warnings
    hub.requests.clear()
    assert download() == path and hub.resolve_requests() == []  # already there: nothing fetched again


def test_a_broken_connection_is_continued_with_a_range(hub):
    hub.cut_at = 1_000_000
    path = download()
    ranges = [byte_range for _path, byte_range in hub.resolve_requests()]
    assert ranges[0] is None and len(ranges) == 2 and ranges[1].startswith("bytes=")
    assert 0 < int(ranges[1].removeprefix("bytes=").rstrip("-")) <= 1_000_000
    assert open(path, "rb").read() == CONTENT


def test_a_cancel_keeps_what_arrived_and_the_next_download_resumes_it(hub):
    cancel = threading.Event()

    def report(progress):
        if progress.done_bytes >= 1_000_000:
            cancel.set()

    with pytest.raises(DownloadCancelled) as cancelled:
        download(on_progress=report, cancel=cancel)
    kept = kept_bytes(REPO)
    assert 1_000_000 <= kept < len(CONTENT) and cancelled.value.kept_bytes == kept
    assert cached_gguf(REPO, FILE) is None  # not complete, so not loadable
    with pytest.raises(ModelLoadError, match="not downloaded yet"):
        ModelSource.parse(SPEC)
    hub.requests.clear()
    path = download()
    assert hub.resolve_requests() == [(f"/{REPO}/resolve/{COMMIT}/{FILE}", f"bytes={kept}-")]
    assert open(path, "rb").read() == CONTENT and kept_bytes(REPO) == 0


def test_a_file_that_arrives_damaged_is_deleted_and_nothing_counts_as_downloaded(hub):
    hub.listed_sha256[FILE] = hashlib.sha256(b"other bytes").hexdigest()  # what the Hub says the file is
    with pytest.raises(ModelLoadError, match="arrived damaged"):
        download()
    folder = constants.HF_HUB_CACHE + "/models--test-org--Tiny-GGUF"
    assert kept_bytes(REPO) == 0 and os.listdir(folder + "/blobs") == []
    assert not os.path.exists(folder + "/snapshots") and not os.path.exists(folder + "/refs/main")
    assert cached_gguf(REPO, FILE) is None
    with pytest.raises(ModelLoadError, match="not downloaded yet"):
        ModelSource.parse(SPEC)


def test_a_file_that_is_not_the_catalogs_pin_is_refused_before_any_byte(hub):
    wrong = GgufQuant("Q4_K_M", FILE, size=len(CONTENT), sha256="0" * 64)
    with network():
        with pytest.raises(ModelLoadError, match="not the 0{64} the catalog names"):
            download_gguf(REPO, FILE, pin=wrong)
        with pytest.raises(ModelLoadError, match=f"has size {len(CONTENT)}, not the 5 the catalog names"):
            download_gguf(REPO, FILE, pin=GgufQuant("Q4_K_M", FILE, size=5))
    assert hub.resolve_requests() == []


def test_a_models_folder_gets_the_file_renamed_into_place_once_checked(hub, tmp_path):
    models = tmp_path / "my-models"
    with network():
        path = download_gguf(REPO, FILE, folder=models)
    assert path == models / FILE and path.read_bytes() == CONTENT
    assert os.listdir(models / ".specchat-downloads" / "blobs") == []  # nothing left half-written
    (models / "other-q8_0.gguf").write_bytes(b"someone else's file")
    with network(), pytest.raises(ModelLoadError, match="is another file"):
        download_gguf(REPO, "other-q8_0.gguf", folder=models)
    assert (models / "other-q8_0.gguf").read_bytes() == b"someone else's file"


def test_the_models_folder_is_where_a_downloaded_file_is_found_too(hub, tmp_path):
    models = tmp_path / "models"  # SPECCHAT_MODELS_DIR: where the offline pair's files go
    models.mkdir()
    (models / FILE).write_bytes(CONTENT)
    assert cached_gguf(REPO, FILE) == models / FILE
    assert cached_gguf(REPO, FILE, size=len(CONTENT) + 1) is None  # not the catalog's file
    assert ModelSource.parse(SPEC).kind == "gguf"


def test_what_the_hub_lists_is_checked_before_it_names_a_path(hub):
    with pytest.raises(ModelLoadError, match="has no file missing-q4_k_m.gguf .*tiny-q4_k_m.gguf"):
        download(f"{REPO}/missing-q4_k_m.gguf")
    hub.commit = "../../../../etc"
    with pytest.raises(UnsafeHubAnswer, match="not a commit sha"):
        download()
    assert hub.resolve_requests() == [] and not os.path.exists(constants.HF_HUB_CACHE + "/models--test-org--Tiny-GGUF")


def test_what_is_not_a_gguf_spec_is_not_taken_for_one():
    from specchat.models.catalog.quants import split_gguf_spec

    assert split_gguf_spec(SPEC) == (REPO, FILE)
    for text in ("org/name", f"hf:{SPEC}", "org/name/sub/file.gguf", "org/../x.gguf", "org/name/../x.gguf", "org/name/x.bin",
                 "./org/name/x.gguf", "org/name/x-00001-of-00002.gguf", "org/name/a\x00.gguf"):
        assert split_gguf_spec(text) is None, text


def network():
    from specchat.models.hub.snapshots import network_for_this_thread

    return network_for_this_thread()
