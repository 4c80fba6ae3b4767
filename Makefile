# Setup is automatic: every target creates .venv from pyproject.toml when it is missing.
SHELL   := /bin/bash
.SHELLFLAGS := -eo pipefail -c
# pyproject's requires-python is 3.11: python3.11 when on PATH, else python3 (checked before the venv is made)
PY      ?= $(shell command -v python3.11 2>/dev/null || echo python3)
VENV    := .venv
VPY     := $(VENV)/bin/python
CORE    := $(VENV)/.installed-core
STAMP   := $(VENV)/.installed
# The extras the test suite needs (pyproject.toml): postgres (psycopg), spark (pyspark; its tests skip without Java
# 17), meds-tasks (ACES), gpu (triton: the fused kernels' tests run them in Triton's interpreter on the CPU), dev
# (pytest, ruff, the PostgreSQL server binaries, the test oracles). `make main` installs none of them.
TEST_EXTRAS ?= postgres,spark,meds-tasks,gpu,dev
OUT     ?= runs/main
PATIENTS ?= 2000
DENSITY ?= 1.0
SEED    ?= 0
LAYOUT  ?= mimic-iii
# Synthetic data only: pseudonyms, and so the admissions' order in the features and the training
# batches, follow the de-identification key; a fixed key makes `make main` give the same numbers
# on every clone. Real data takes its own secret key (MIMIC_DEID_KEY or a key file), never this one.
SYNTH_KEY ?= synthetic-data-only-not-a-secret

.PHONY: setup main test test-fast bench-extract bench-models clean

$(VPY):
	$(PY) -c 'import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null \
	  || { echo "make: $(PY) is not Python 3.11 with venv and ensurepip (set PY=python3.11; Debian: apt install python3.11-venv)" >&2; exit 1; }
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

## the main job's install: the package and its dependencies, no extra (held already by a test install as new as
## pyproject.toml)
$(CORE): pyproject.toml | $(VPY)
	if [ ! $(STAMP) -nt pyproject.toml ]; then $(VPY) -m pip install -q -e .; fi
	touch $(CORE)

## the test suite's install: the extras above too (it holds the main job's)
$(STAMP): pyproject.toml | $(VPY)
	$(VPY) -m pip install -q -e '.[$(TEST_EXTRAS)]'
	$(VPY) -m pip install -q --no-deps $$($(VPY) -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["tool"]["mimic-rank1"]["no-deps"])')
	touch $(STAMP) $(CORE)

setup: $(STAMP)

## main: the whole job on the embedded default (DuckDB + synthetic MIMIC-III; LAYOUT=mimic-iv: the same
## world in MIMIC-IV's layout):
## synth -> extract -> train rank-1 -> evaluate (the model's score_samples) -> metric table
main: export MIMIC_DEID_KEY = $(SYNTH_KEY)
main: $(CORE)
	mkdir -p $(OUT)
	$(VPY) cli.py synth --out $(OUT)/mimic --patients $(PATIENTS) --seed $(SEED) --density $(DENSITY) --layout $(LAYOUT)
	$(VPY) cli.py extract --source $(OUT)/mimic --out $(OUT)/features
	$(VPY) cli.py train --data $(OUT)/features --model rank1 --seed $(SEED) --threads 1 | tee $(OUT)/train.log
	$(VPY) cli.py evaluate --run "$$(sed -n 's/^run_id: //p' $(OUT)/train.log)" --split val --split test --threads 1

## test: the whole test suite (what CI runs); PostgreSQL comes from the pgserver wheel (dev extra).
## PYTEST_ARGS narrows it, e.g. make test PYTEST_ARGS='tests/test_pgsource.py -x'
PYTEST_ARGS ?=
test: $(STAMP)
	$(VPY) -m pytest -q $(PYTEST_ARGS)

## test-fast: the fast loop, every test but the slow ones (servers, subprocesses, PostgreSQL, trained runs,
## synthetic worlds, long integration tests: tests/conftest.py's SLOW_FIXTURES and @pytest.mark.slow)
test-fast: $(STAMP)
	$(VPY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

## bench-extract: extraction at 1%, 3%, 10% of MIMIC-III's patients (benchmarks/extract.py)
bench-extract: $(STAMP)
	$(VPY) -m benchmarks.extract

## bench-models: every model variant x 3 seeds x (random, era) splits -> compare table
bench-models: $(STAMP)
	$(VPY) cli.py benchmark-models --synth runs/bench/mimic --out runs/bench --seeds 0 --seeds 1 --seeds 2 --max-steps 1500 --eval-every 250 --jobs 2

## clean: every output of the targets above: runs/, the test caches (pytest's, hypothesis'), and the tracking store
## they made (mlflow.db, its lock and mlruns/, so no run outlives its features)
clean:
	rm -rf runs .pytest_cache .hypothesis mlflow.db mlflow.db.init.lock mlruns
