# eagle-datagen: `make demo` runs the main job on this machine with stand-ins, `make test` runs the test suite.
# Both set up .venv themselves; the venv is reused while the requirement files are unchanged.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
REQ_FILES := requirements.txt requirements-dev.txt constraints.txt pyproject.toml
REQ_HASH := $(shell cat $(REQ_FILES) | sha256sum | cut -c1-16)
STAMP := $(VENV)/.installed-$(REQ_HASH)
export EAGLE_DATAGEN_CACHE ?= $(CURDIR)/.cache
export HF_HUB_OFFLINE := 1
# The real SGLang engine's own environment (SGLang pins its own transformers) and its tiny model; docs/internals/real-engine.md.
SGLANG_VENV := .venv-sglang
SGLANG_PINS := engine/requirements.txt engine/requirements-nodeps.txt engine/constraints.txt engine/patch_torchvision.py
SGLANG_HASH := $(shell cat $(SGLANG_PINS) | sha256sum | cut -c1-16)
SGLANG_STAMP := $(SGLANG_VENV)/.installed-$(SGLANG_HASH)

.PHONY: venv sglang sglang-serve speculators-env specforge-env loop-models eval-loop browser compose test test-fast demo demo-cli demo-multiturn airflow lint bench constraints clean

venv: $(STAMP)

$(STAMP): $(REQ_FILES)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@rm -f $(VENV)/.installed-*
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $@

# `make sglang`: .venv-sglang (SGLang 0.5.23 on a CPU torch, the smg router) and the tiny model in the cache.
sglang: venv $(SGLANG_STAMP)
	@TRANSFORMERS_VERBOSITY=error $(BIN)/python engine/build_tiny_model.py "$(EAGLE_DATAGEN_CACHE)" >/dev/null

$(SGLANG_STAMP): $(SGLANG_PINS)
	@test -x $(SGLANG_VENV)/bin/python || $(PYTHON) -m venv $(SGLANG_VENV)
	@rm -f $(SGLANG_VENV)/.installed-*
	@echo "building $(SGLANG_VENV) (SGLang on the CPU, about 2.4 GB) ..."
	$(SGLANG_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SGLANG_VENV)/bin/python -m pip install --quiet -r engine/requirements.txt -c engine/constraints.txt
	$(SGLANG_VENV)/bin/python -m pip install --quiet --no-deps -r engine/requirements-nodeps.txt
	$(SGLANG_VENV)/bin/python engine/patch_torchvision.py
	@touch $@

sglang-serve: PORT = 30000
sglang-serve: sglang  ## one real SGLang server (tiny model) on 127.0.0.1:$(PORT) in the foreground, until Ctrl-C
	$(BIN)/python -m eagle_datagen_stack.sglang_engine --port $(PORT) $(SGLANG_SERVE_ARGS)

# A side environment with speculators 0.9.0 on torch 2.13.0 (pip gets a CPU build here; elsewhere torch==2.13.0
# may mean a CUDA build of several GB) for tests/export/test_speculators_e2e.py, which skips without it.
# `make test` builds it (1-3 minutes once, 1.5 GB); it is reused while its pins are unchanged.
SPECULATORS_VENV := .venv-speculators
SPECULATORS_PINS := tests/export/speculators-env.txt
SPECULATORS_STAMP := $(SPECULATORS_VENV)/.installed-$(shell cat $(SPECULATORS_PINS) | sha256sum | cut -c1-16)
speculators-env: $(SPECULATORS_STAMP)

$(SPECULATORS_STAMP): $(SPECULATORS_PINS)
	@test -x $(SPECULATORS_VENV)/bin/python || $(PYTHON) -m venv $(SPECULATORS_VENV)
	@rm -f $(SPECULATORS_VENV)/.installed-*
	@echo "building $(SPECULATORS_VENV) (speculators 0.9.0 on a CPU torch) ..."
	$(SPECULATORS_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(SPECULATORS_VENV)/bin/python -m pip install --quiet --no-deps speculators==0.9.0 hs-connectors==0.9.0
	$(SPECULATORS_VENV)/bin/python -m pip install --quiet -r $(SPECULATORS_PINS)
	@touch $@

# A side environment with SpecForge 0.2.0 (--no-deps) on torch 2.13.0 (a CPU build here) for
# tests/export/test_specforge_reader.py, which skips without it: SpecForge's own reader of pre-tokenized prompts reads
# our export. SpecForge's pins (torch 2.11.0, sglang 0.5.14) are left out: the reader imports none of them, and
# SpecForge trains only with CUDA and its own SGLang (docs/internals/training.md). About 1.5 minutes once, 0.9 GB.
SPECFORGE_VENV := .venv-specforge
SPECFORGE_PINS := tests/export/specforge-env.txt
SPECFORGE_STAMP := $(SPECFORGE_VENV)/.installed-$(shell cat $(SPECFORGE_PINS) | sha256sum | cut -c1-16)
specforge-env: $(SPECFORGE_STAMP)

$(SPECFORGE_STAMP): $(SPECFORGE_PINS)
	@test -x $(SPECFORGE_VENV)/bin/python || $(PYTHON) -m venv $(SPECFORGE_VENV)
	@rm -f $(SPECFORGE_VENV)/.installed-*
	@echo "building $(SPECFORGE_VENV) (SpecForge 0.2.0's reader on a CPU torch) ..."
	$(SPECFORGE_VENV)/bin/python -m pip install --quiet torch==2.13.0 -c $(SPECFORGE_PINS)
	$(SPECFORGE_VENV)/bin/python -m pip install --quiet --no-deps specforge==0.2.0
	$(SPECFORGE_VENV)/bin/python -m pip install --quiet -r $(SPECFORGE_PINS)
	@touch $@

# The loop closed on the CPU: on-policy data -> EAGLE-3 drafter -> accept length in the real SGLang, paired A/Bs against
# an off-policy and a random drafter; prints the table (docs/internals/evaluation-cpu-loop.md has the measured table).
# About 3-5 minutes on 2 cores, and about 4 more the first time (`make loop-models` trains its target and other model).
# The CPU loop's trained target and other model (engine/build_loop_models.py), in the cache: about 2 minutes each the
# first time (trained in .venv-speculators), then reused while the builder, its trainer and the demo prompts are unchanged.
loop-models: sglang speculators-env
	@TRANSFORMERS_VERBOSITY=error $(BIN)/python engine/build_loop_models.py "$(EAGLE_DATAGEN_CACHE)" >/dev/null
	@TRANSFORMERS_VERBOSITY=error $(BIN)/python engine/build_loop_models.py "$(EAGLE_DATAGEN_CACHE)" --other >/dev/null

eval-loop: sglang speculators-env loop-models  ## train drafters on on-policy and off-policy data on the CPU, print accept lengths
	$(BIN)/python -m eagle_datagen_stack.cpu_loop --work .eval-loop

# Debian's Chromium for the browser test of the Airflow UI (tests/stack/test_browser_ui.py); Playwright's own
# browser download cannot work here (no access beyond the package registries).
browser:
	@command -v chromium >/dev/null || { \
	  [ "$$(id -u)" = 0 ] || { echo "make browser: Debian's chromium is missing: sudo apt-get install chromium"; exit 1; }; \
	  echo "installing Debian's chromium for the browser test ..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Debian's docker-compose validates docker-compose.yaml in tests/deploy/ (`docker-compose config -q` needs no
# Docker engine, and none runs here).
compose:
	@command -v docker-compose >/dev/null || { \
	  [ "$$(id -u)" = 0 ] || { echo "make compose: Debian's docker-compose is missing: sudo apt-get install docker-compose"; exit 1; }; \
	  echo "installing Debian's docker-compose to validate docker-compose.yaml ..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null; }

test: venv sglang speculators-env specforge-env loop-models lint browser compose  ## ruff, then the whole suite, integration tests included (what CI runs)
	EAGLE_DATAGEN_REQUIRE_ENGINE=1 EAGLE_DATAGEN_EXIT_RUNS=50 $(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: venv  ## skip the slow integration tests
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# `make demo ENGINE=sglang`: the same demo on two real SGLang CPU servers (tiny model) behind the real smg router.
ENGINE ?= sim
demo: venv $(if $(filter sglang,$(ENGINE)),sglang)  ## the main job through Airflow on this machine: SeaweedFS, stand-in SGLang (ENGINE=sglang: the real one), Airflow on SQLite
	$(BIN)/python -m eagle_datagen_stack.demo --home .demo --engine $(ENGINE)

demo-cli: venv  ## the same job without Airflow (the `eagle-datagen run` path), in seconds
	$(BIN)/python -m eagle_datagen.demo --output .demo-cli

demo-multiturn: venv  ## multi-turn and agentic conversations on-policy, without Airflow (docs/internals/multi-turn.md)
	$(BIN)/python -m eagle_datagen.demo --multi-turn --output .demo-multiturn

PORT ?= 8080
airflow: venv  ## the demo's stack with Airflow's UI on 127.0.0.1:$(PORT), until Ctrl-C
	$(BIN)/python -m eagle_datagen_stack.ui --port $(PORT)

lint: venv
	$(BIN)/ruff check include tests bench dags plugins engine

bench: venv  ## tokenization benchmark; writes its table to stdout (copy it into docs/internals/benchmarks.md)
	$(BIN)/python bench/bench_tokenize.py

constraints: venv  ## re-pin the full dependency tree after changing requirements*.txt
	( echo "# Full resolved dependency tree for requirements-dev.txt (pip freeze); keeps installs reproducible."; \
	  $(BIN)/python -m pip freeze --exclude-editable | grep -v '^eagle-datagen' ) > constraints.txt

clean:
	rm -rf .demo .demo-cli .demo-multiturn .eval-loop .pytest_cache .ruff_cache
