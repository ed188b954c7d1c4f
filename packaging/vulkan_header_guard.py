"""Let llama.cpp's Vulkan backend build against Vulkan headers older than VK_EXT_layer_settings.

`make test-offload` builds the llama.cpp that llama-cpp-python vendors with `-DGGML_VULKAN=ON` on Debian 12, whose
Vulkan headers are 1.3.239. `ggml-vulkan.cpp` sets up its instance with `vk::LayerSettingEXT` and
`vk::LayerSettingsCreateInfoEXT` (from `VK_EXT_layer_settings`, in later headers) without a guard, so the build
stops there. This script puts that block under `#if defined(VK_EXT_layer_settings)` and keeps the plain
`InstanceCreateInfo` otherwise; the settings only turn on the validation layer's best-practice checks, which a
build without those headers cannot ask for anyway. Standard library only; run it on the unpacked sources:

    python3 packaging/vulkan_header_guard.py build/offload/src/vendor/llama.cpp

It is idempotent (a patched file is left as it is) and exits 1 with a message when the block is not found, so that
a llama.cpp whose code moved fails here, by name, rather than later in the compiler.
"""

from __future__ import annotations

import sys
from pathlib import Path

RELATIVE = Path("ggml/src/ggml-vulkan/ggml-vulkan.cpp")
MARK = "// specchat: VK_EXT_layer_settings guard"
START = "    std::vector<vk::LayerSettingEXT> settings = {"
END = ("    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, "
       "&layer_setting_info);")
PLAIN = "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);"


def guarded(text: str) -> str:
    """Return `text` (ggml-vulkan.cpp's source) with the layer-settings block under a header guard.

    Takes the whole file as a string and returns the patched string, the same string when it already carries the
    guard. Raises ValueError naming what was missing when the block is not where this script expects it.
    """
    if MARK in text:
        return text
    start = text.find(START)
    if start < 0:
        raise ValueError(f"the line {START.strip()!r} is not in the file")
    end = text.find(END, start)
    if end < 0:
        raise ValueError(f"the line {END.strip()!r} does not follow it")
    end += len(END)
    block = text[start:end]
    replacement = (f"#if defined(VK_EXT_layer_settings)  {MARK}\n{block}\n#else\n{PLAIN}\n"
                   f"    (void) enable_best_practice;\n#endif")
    return text[:start] + replacement + text[end:]


def main(argv: list[str]) -> int:
    """Patch the ggml-vulkan.cpp under the llama.cpp source folder argv[1]; return the exit status (0, 1 or 2)."""
    if len(argv) != 2:
        print(f"usage: {argv[0]} LLAMA_CPP_SOURCE_DIR", file=sys.stderr)
        return 2
    path = Path(argv[1]) / RELATIVE
    if not path.is_file():
        print(f"vulkan_header_guard: {path} not found: is {argv[1]} llama.cpp's source folder?", file=sys.stderr)
        return 1
    text = path.read_text(encoding="utf-8")
    try:
        patched = guarded(text)
    except ValueError as error:
        print(f"vulkan_header_guard: {path}: {error}; this llama.cpp needs a new patch", file=sys.stderr)
        return 1
    if patched == text:
        print(f"vulkan_header_guard: {path} already guarded")
    else:
        path.write_text(patched, encoding="utf-8")
        print(f"vulkan_header_guard: guarded the VK_EXT_layer_settings block of {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
