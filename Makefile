# `make demo` and `make test` each set everything up first (a virtualenv in .venv).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup test unit lint docs docs-pictures evaluator-report demo bench bench-tpch bench-nexmark bench-all clean

setup: $(VENV)/.installed

# the exact versions of constraints.txt (setup.py declares the compatible ranges)
$(VENV)/.installed: setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,docs]'
	touch $@

test: setup
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=30 tests

# the Spark-free tier: kernels, arrangements and the Kafka decoder's values (seconds)
unit: setup
	$(PY) -m pytest -q tests/fast

# the suite's ticks that fall back to the DataFrame evaluator, by reason (tests/evaluator_report.py)
evaluator-report: setup
	EVALUATOR_REPORT=$(abspath evaluator-report) $(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -q \
		-p tests.evaluator_report tests/unit tests/functional

# ruff (ruff.toml) and mypy on the engine (mypy.ini), in a virtualenv of their own: mypy
# needs a newer pathspec than dbt-core allows beside it
LINT_VENV := .venv-lint
$(LINT_VENV)/.installed:
	$(PYTHON) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/pip install --quiet ruff==0.17.5 mypy==2.4.1
	touch $@

lint: setup $(LINT_VENV)/.installed
	$(LINT_VENV)/bin/ruff check .
	$(LINT_VENV)/bin/mypy --python-executable $(PY) dbt_incremental_stream

# the manual (mkdocs.yml, docs/) into site/: --strict fails on a broken link, anchor or page
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# the home page, the tutorial and the SQL reference as a reader sees them, rendered by
# headless Chromium (Debian's chromium) into site-pictures/
DOC_PICTURES := index tutorial/first-streaming-model reference/sql
docs-pictures: docs
	mkdir -p site-pictures
	for p in $(DOC_PICTURES); do \
		chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,2400 \
			--screenshot=site-pictures/$$(echo $$p | tr / -).png file://$(abspath site)/$$p.html; \
	done

demo: setup
	$(PY) examples/demo.py $(ARGS)

bench: setup
	$(PY) bench/join_aggregate.py
	$(PY) bench/backfill.py

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
	$(PY) bench/clock_load.py
	$(PY) bench/computed_keys.py
	$(PY) bench/windows.py
	$(PY) bench/windows.py --views running
	$(PY) bench/windows.py --views moving
	$(PY) bench/windows.py --views moments
	$(PY) bench/windows.py --views running_moments
	$(PY) bench/windows.py --views mixed
	$(PY) bench/windows.py --views by_spark
	$(PY) bench/windows.py --views distinct

clean:
	rm -rf site site-pictures $(VENV) .venv-pydbsp $(LINT_VENV) *.egg-info .pytest_cache .hypothesis spark-warehouse metastore_db
