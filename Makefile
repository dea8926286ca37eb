# `make demo` and `make test` each set everything up first (a virtualenv in .venv).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup test unit demo bench bench-tpch bench-nexmark bench-all clean

setup: $(VENV)/.installed

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

test: setup
	$(PY) -m pytest -n 2 --dist loadfile tests

# the Spark-free tier: kernels, arrangements and the Kafka decoder's values (seconds)
unit: setup
	$(PY) -m pytest -q tests/fast

demo: setup
	$(PY) examples/demo.py $(ARGS)

bench: setup
	$(PY) bench/join_aggregate.py

# TPC-H at scale factor 1 by default: make bench-tpch ARGS="--sf 0.1 --queries 1,3,6"
bench-tpch: setup
	$(PY) bench/tpch.py $(ARGS)

# the pydbsp baseline needs Python >= 3.12, in a virtualenv of its own
PYTHON312 ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python; do $$p --version >/dev/null 2>&1 && echo $$p && break; done)
.venv-pydbsp/.installed:
	$(PYTHON312) -m venv .venv-pydbsp
	.venv-pydbsp/bin/pip install --quiet pydbsp==2.1.0
	touch $@

bench-nexmark: setup .venv-pydbsp/.installed
	$(PY) bench/nexmark.py $(ARGS)

# every benchmark, at the sizes bench/README.md reports
bench-all: bench-nexmark
	$(PY) bench/kafka_e2e.py
	$(PY) bench/dbt_project.py
	$(PY) bench/memory.py
	$(PY) bench/join_aggregate.py

clean:
	rm -rf $(VENV) .venv-pydbsp *.egg-info .pytest_cache .hypothesis spark-warehouse metastore_db
