# Setup is automatic: every target creates .venv from pyproject.toml when it is missing.
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
OUT     ?= runs/main
PATIENTS ?= 2000
SEED    ?= 0

.PHONY: setup main test bench clean

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[postgres,dev]'
	touch $(STAMP)

setup: $(STAMP)

## main: the whole job on the embedded default (DuckDB + synthetic MIMIC-III)
main: $(STAMP)
	$(VPY) cli.py synth --out $(OUT)/mimic --patients $(PATIENTS) --seed $(SEED)
	$(VPY) cli.py extract --source $(OUT)/mimic --out $(OUT)/features

## test: the whole test suite (what CI runs)
test: $(STAMP)
	$(VPY) -m pytest -q

clean:
	rm -rf runs .pytest_cache
