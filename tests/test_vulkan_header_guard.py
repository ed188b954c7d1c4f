"""packaging/vulkan_header_guard.py, which lets `make test-offload` build llama.cpp's Vulkan backend against Debian
12's older Vulkan headers: the block is guarded once, a second run changes nothing, and a llama.cpp whose code moved
fails by name."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "packaging" / "vulkan_header_guard.py"
SOURCE = """    VkBool32 enable_best_practice = layer_settings;
    std::vector<vk::LayerSettingEXT> settings = {
        {"VK_LAYER_KHRONOS_validation", "validate_best_practices", vk::LayerSettingTypeEXT::eBool32, 1,
         &enable_best_practice},
    };
    vk::LayerSettingsCreateInfoEXT layer_setting_info(settings);
    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, &layer_setting_info);
    vk_instance.instance = vk::createInstance(instance_create_info);
"""


@pytest.fixture(scope="module")
def guard():
    spec = importlib.util.spec_from_file_location("vulkan_header_guard", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_layer_settings_block_is_guarded_once(guard, tmp_path, capsys):
    target = tmp_path / guard.RELATIVE
    target.parent.mkdir(parents=True)
    target.write_text(SOURCE)
    assert guard.main(["guard", str(tmp_path)]) == 0
    patched = target.read_text()
    assert patched.index("#if defined(VK_EXT_layer_settings)") < patched.index("vk::LayerSettingEXT")
    assert "#else\n" + guard.PLAIN in patched and patched.rstrip().endswith("createInstance(instance_create_info);")
    assert guard.main(["guard", str(tmp_path)]) == 0 and target.read_text() == patched
    assert "already guarded" in capsys.readouterr().out


def test_a_moved_block_or_a_wrong_folder_fails_by_name(guard, tmp_path, capsys):
    assert guard.main(["guard", str(tmp_path)]) == 1
    assert "not found" in capsys.readouterr().err
    target = tmp_path / guard.RELATIVE
    target.parent.mkdir(parents=True)
    target.write_text("// nothing of the kind\n")
    assert guard.main(["guard", str(tmp_path)]) == 1
    assert "needs a new patch" in capsys.readouterr().err
    assert guard.main(["guard"]) == 2
