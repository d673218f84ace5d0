# eagle-datagen: `make demo` runs the main job on the embedded default, `make test` runs the test suite.
# Both set up .venv themselves; the venv is reused while the requirement files are unchanged.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
REQ_FILES := requirements.txt requirements-dev.txt constraints.txt pyproject.toml
REQ_HASH := $(shell cat $(REQ_FILES) | sha256sum | cut -c1-16)
STAMP := $(VENV)/.installed-$(REQ_HASH)
export EAGLE_DATAGEN_CACHE ?= $(CURDIR)/.cache
export HF_HUB_OFFLINE := 1

.PHONY: venv test test-fast demo lint bench constraints clean

venv: $(STAMP)

$(STAMP): $(REQ_FILES)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@rm -f $(VENV)/.installed-*
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $@

test: venv lint  ## ruff, then the whole suite, integration tests included (what CI runs)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: venv  ## skip the slow integration tests
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

demo: venv  ## the main job on the embedded default: demo recipe, stand-in tokenizer and SGLang server
	$(BIN)/python -m eagle_datagen.demo --output .demo

lint: venv
	$(BIN)/ruff check include tests bench dags plugins

bench: venv  ## tokenization benchmark; writes its table to stdout (copy it into docs/benchmarks.md)
	$(BIN)/python bench/bench_tokenize.py

constraints: venv  ## re-pin the full dependency tree after changing requirements*.txt
	( echo "# Full resolved dependency tree for requirements-dev.txt (pip freeze); keeps installs reproducible."; \
	  $(BIN)/python -m pip freeze --exclude-editable | grep -v '^eagle-datagen' ) > constraints.txt

clean:
	rm -rf .demo .pytest_cache .ruff_cache
