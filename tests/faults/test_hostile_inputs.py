"""Files from elsewhere that would run code or crash a run: what the user sees (one clear line, no traceback) and
that nothing in them ran.

- a model folder whose weights are a pickle that writes a file when unpickled: refused, the file never appears;
- a model folder whose config asks for remote code (`auto_map` to a modeling file that writes a file when
  imported): refused, nothing imported;
- malformed prompt files for `specchat bench`: one line per problem, exit code 2, nothing measured.
"""

import json
import shutil

import pytest
import torch
from test_cli import assert_one_line_error, run

from specchat.core.errors import ModelLoadError
from specchat.engine.loading.load import LoadOptions, load_model
from specchat.models.sources import ModelSource


class WritesAFile:
    """Unpickling this calls open(<marker>, "w"): the proof that a pickle ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def a_model_folder(tmp_path, model_folders, name):
    folder = tmp_path / name
    shutil.copytree(model_folders / "target", folder)
    return folder


def test_pickle_weights_that_run_code_are_refused_and_never_run(tmp_path, model_folders, capsys):
    folder = a_model_folder(tmp_path, model_folders, "pickled")
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    marker = tmp_path / "pickle-ran"
    torch.save({"model.embed_tokens.weight": WritesAFile(marker)}, folder / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="pickle"):
        load_model(ModelSource.parse(str(folder)), LoadOptions(device="cpu"))
    code, _, err = run(capsys, "generate", "--target", str(folder), "--drafter", "none", "--prompt", "Hi")
    assert_one_line_error(code, err, "pickle")
    assert not marker.exists()


def test_a_folder_asking_for_remote_code_is_refused_and_nothing_is_imported(tmp_path, model_folders, capsys):
    folder = a_model_folder(tmp_path, model_folders, "remote-code")
    marker = tmp_path / "remote-code-ran"
    (folder / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (folder / "configuration_evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="evil", auto_map={"AutoConfig": "configuration_evil.EvilConfig",
                                               "AutoModelForCausalLM": "modeling_evil.EvilModel"})
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError):
        load_model(ModelSource.parse(str(folder)), LoadOptions(device="cpu"))
    code, _, err = run(capsys, "generate", "--target", str(folder), "--drafter", "none", "--prompt", "Hi")
    assert_one_line_error(code, err, "--trust-remote-code only for a folder whose code you have read")
    assert not marker.exists()


@pytest.mark.parametrize("content, fragment", [
    ("not json", "line 1: not valid JSON"),
    ('{"question_id": 1, "category": "x"}', "line 1: missing turns"),
    ('{"question_id": 1, "category": "x", "turns": []}', "'turns' must be a non-empty list"),
    ('{"question_id": [1], "category": "x", "turns": ["hi"]}', "'question_id' must be a number or a non-empty"),
    ('{"question_id": null, "category": "x", "turns": ["hi"]}', "'question_id' must be a number or a non-empty"),
    ('{"question_id": 1, "category": {"a": 1}, "turns": ["hi"]}', "'category' must be a non-empty string"),
    ('{"question_id": 1, "category": "x", "turns": [["nested"]]}', "turns"),
    ("[1, 2]", "expected a JSON object"),
    ("\ufeff\x00\x00", "not valid JSON"),
    ("", "has no prompts"),
])
def test_malformed_prompt_files_get_one_line_each(capsys, tmp_path, content, fragment):
    path = tmp_path / "prompts.jsonl"
    path.write_text(content)
    code, out, err = run(capsys, "bench", "--prompts", str(path))
    assert_one_line_error(code, err, fragment)
    assert out == ""  # nothing measured, no partial table


def test_a_missing_or_binary_prompt_file(capsys, tmp_path):
    code, _, err = run(capsys, "bench", "--prompts", str(tmp_path / "missing.jsonl"))
    assert_one_line_error(code, err, "cannot read")
    binary = tmp_path / "prompts.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage\x80\x81")
    code, _, err = run(capsys, "bench", "--prompts", str(binary))
    assert code == 2 and "Traceback" not in err
