"""What the window says about devices: Settings → Device lists what is here and keeps the GPU layers setting, and
Help → About says what llama.cpp and torch were built with and where the loaded models run."""

from specchat.engine.backends.llamacpp.built import build_report


def test_settings_list_the_devices_here_and_keep_the_gpu_layers(qtbot):
    from specchat.ui.settings import AppSettings, SettingsDialog

    dialog = SettingsDialog(AppSettings(gpu_layers=12), lambda target, draft: (True, ""))
    qtbot.addWidget(dialog)
    text = dialog.devices_here.text()
    assert text.startswith("Here: CPU · llama.cpp: ") and " · torch: " in text
    report = build_report()
    for note in report.unused_gpu():  # a GPU no build can use is said here too, with its fix
        assert note in text
    assert dialog.settings().gpu_layers == 12 and dialog.settings().load_gpu_layers == 12
    dialog.gpu_layers.setValue(-1)
    assert dialog.gpu_layers.text().startswith("auto") and dialog.settings().load_gpu_layers is None
    dialog.gpu_layers.setValue(0)
    assert dialog.settings().load_gpu_layers == 0  # none: the model stays on the CPU
    assert AppSettings(gpu_layers=3).model_key() != AppSettings().model_key()  # changing it reloads the models


def test_about_says_what_was_built_and_where_the_models_run(qtbot, native_pair):
    from specchat.ui.about import about_html

    text = about_html(native_pair)
    report = build_report()
    assert "Where it runs" in text and report.torch_line() in text
    assert f"target: {native_pair.target.runs_on}" in text and report.llama_line() in text
    assert "Where it runs" in about_html()  # before a model is loaded: the builds alone
