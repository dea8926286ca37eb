# `make demo` and `make test` each set everything up first (a virtualenv in .venv).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup test demo bench bench-tpch clean

setup: $(VENV)/.installed

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

test: setup
	$(PY) -m pytest -n 2 --dist loadfile tests

demo: setup
	$(PY) examples/demo.py $(ARGS)

bench: setup
	$(PY) bench/join_aggregate.py

# TPC-H at scale factor 1 by default: make bench-tpch ARGS="--sf 0.1 --queries 1,3,6"
bench-tpch: setup
	$(PY) bench/tpch.py $(ARGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis spark-warehouse metastore_db
