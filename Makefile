# The two commands of the README: `make report` (the main job) and `make test`.
# Each sets up everything from nothing: the venv, torch 2.13.0 (first, from the
# local CPU wheel), the project, then the C++ core (cached per torch version and
# source hash, so it compiles once per machine).

SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: setup core test report clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet "setuptools>=64" wheel
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet --no-build-isolation -e ".[test]"
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)

core: setup
	$(PY) -m device_impl build-core

test: core
	$(PY) -m pytest tests opsuite

report: core
	mkdir -p build/reports
	$(PY) -m device_impl smoke | tee build/reports/smoke.txt
	$(PY) -m pytest tests -q -p no:cacheprovider --junitxml=build/reports/unit-tests.xml | tail -n 3 | tee build/reports/unit-tests.txt
	$(PY) benches/elementwise_ratio.py | tee build/reports/elementwise-ratio.txt

clean:
	rm -rf build
