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

.PHONY: setup core test test-hosts report clean

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

# two pytest-xdist workers by default (the 2-core machines CI runs on: about half the single-process time);
# TEST_JOBS=0 runs in one process
TEST_JOBS ?= 2
test: core
	$(PY) -m pytest -n $(TEST_JOBS) tests opsuite

# `make test-hosts`: the host-sensitive tests (kernel differential tests and the op suite in eager) with CPU
# eager, the oracle, on each kernel path a host can give it: the DEFAULT and AVX2 ATen kernels, an AVX2-only
# host's oneDNN (ONEDNN_MAX_CPU_ISA=AVX2: no bf16 convolutions), oneDNN off, and this host's native level.
# Each run's counts are printed; the target fails if any run fails.
HOST_SENSITIVE ?= tests/kernels opsuite
HOST_VARIANTS := native default avx2 avx2-host onednn-off
test-hosts: core
	@mkdir -p build; failed=""; for v in $(HOST_VARIANTS); do \
	  case $$v in native) env="" ;; default) env="ATEN_CPU_CAPABILITY=default" ;; avx2) env="ATEN_CPU_CAPABILITY=avx2" ;; \
	    avx2-host) env="ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2" ;; onednn-off) env="" ;; esac; \
	  opt=""; [ $$v = onednn-off ] && opt="--cpu-onednn off"; \
	  echo "== $$v: $$env $(PY) -m pytest $(HOST_SENSITIVE) $$opt"; \
	  status=0; env $$env $(PY) -m pytest $(HOST_SENSITIVE) -p no:cacheprovider $$opt > build/test-hosts-$$v.log 2>&1 || status=$$?; \
	  grep -E "^CPU oracle" build/test-hosts-$$v.log || true; tail -n 1 build/test-hosts-$$v.log; \
	  [ $$status = 0 ] || failed="$$failed $$v"; \
	done; if [ -n "$$failed" ]; then echo "host variants failing:$$failed (logs: build/test-hosts-<variant>.log)"; exit 1; fi

# `make report`: the main job. Every step reads or writes build/; the last one renders
# build/reports/*.html from build/results.sqlite and the files beside it, then prints a summary.
# A step that finds failures (conformance, a benchmark) does not stop the report: it shows them.
# The op suite (op specs, the device-contract checks at smoke depth, PyTorch's OpInfo) runs its modes side
# by side, one process each (the compiled mode REPORT_COMPILED_SHARDS worker processes), on the two cores; the op specs first, then the contract checks and the
# nn.Module sweep, so a budget cuts the OpInfo tail. Knobs: REPORT_MODE_BUDGET (seconds per mode, 0 = no limit;
# a mode cut short keeps the cases it ran), REPORT_BENCH (pytest-benchmark flags).
REPORT_MODE_BUDGET ?= 300
# The compiled mode costs about 3x an eager case (Dynamo tracing and AOTAutograd per case): it runs in this many
# pytest-xdist workers fed from one queue in the suite's order, 64 tests at a time (-n N --dist load
# --maxschedchunk 64), so they finish together whatever a test costs (a fixed hash split, --shard K/N, had left one
# shard ~100 s behind the other) and a budget still cuts the OpInfo tail (worksteal would hand the second worker the
# second half of the suite from the start); each worker is a run in build/shards/compiled.sqlite, joined into one run
# after (`python -m harness merge --join`).
REPORT_COMPILED_SHARDS ?= 2
REPORT_BENCH ?= --benchmark-max-time=0.25 --benchmark-min-rounds=3
# exit status of a step that may find failures: 0 ok, 1 failures found (shown in the report),
# 124 cut by its time budget; anything else is an error that stops the report
ALLOWED = case $$status in 0) ;; 1) echo "  (failures found: see the report)";; 124) echo "  (stopped by its time budget; what it ran is kept)";; *) echo "  step failed with status $$status"; exit $$status;; esac

# The op-suite modes the device provides (harness.modes decides); a mode whose check itself fails
# is reported and left out, so one broken check does not stop the report.
define AVAILABLE_MODES
import sys
from harness import modes
chosen = []
for name in modes.MODES:
    try:
        reason = modes.get(name).available("neuron")
    except Exception as error:
        reason = f"its availability check raised {type(error).__name__}: {error}"
    if reason is None:
        chosen.append(name)
    else:
        print(f"  mode {name} not run: {reason}", file=sys.stderr)
print(" ".join(chosen))
endef
export AVAILABLE_MODES

report: core
	@mkdir -p build/reports build/benchmarks build/traces build/junit
	@date +%s > build/reports/.started
	@rm -f build/junit/opsuite-*.xml build/reports/opsuite-*.log build/reports/opsuite-*.status
	@echo "[report 1/5] conformance: pytest opsuite in each mode the device provides, side by side (budget $(REPORT_MODE_BUDGET) s each)"
	@modes=$$($(PY) -c "$$AVAILABLE_MODES"); procs=$$modes; \
	echo "  modes: $$modes, one process each, compiled in $(REPORT_COMPILED_SHARDS) pytest-xdist workers (logs: build/reports/opsuite-<mode>.log)"; \
	rm -rf build/shards; mkdir -p build/shards; \
	files="$$(ls opsuite/test_*.py | grep -v -E '/test_(opinfo|contract|modules).py$$' || true) \
	  $$(ls opsuite/test_contract.py opsuite/test_modules.py opsuite/test_opinfo.py 2>/dev/null || true)"; \
	for proc in $$procs; do \
	  mode=$$proc; shard=""; \
	  if [ $$mode = compiled ] && [ $(REPORT_COMPILED_SHARDS) -gt 1 ]; then \
	    shard="-n $(REPORT_COMPILED_SHARDS) --dist load --maxschedchunk 64 --results build/shards/$$proc.sqlite"; fi; \
	  ( status=0; PYTHONUNBUFFERED=1 timeout --signal=INT --kill-after=60 $(REPORT_MODE_BUDGET) \
	      $(PY) -m pytest $$files -q -p no:cacheprovider --neuron-mode $$mode $$shard -o console_output_style=count \
	      --tb=no -rN --junitxml=build/junit/opsuite-$$proc.xml > build/reports/opsuite-$$proc.log 2>&1 \
	      || status=$$?; echo $$status > build/reports/opsuite-$$proc.status ) & \
	done; \
	started=$$(date +%s); \
	while [ -n "$$(jobs -rp)" ]; do \
	  sleep 15; line="  $$(( $$(date +%s) - started )) s:"; \
	  for proc in $$procs; do \
	    done_=$$(grep -o '\[ *[0-9]*/[0-9]*\]' build/reports/opsuite-$$proc.log 2>/dev/null | tail -n 1 | tr -d '[ ]' \
	      || true); \
	    line="$$line $$proc $${done_:-starting}"; \
	  done; echo "$$line tests"; \
	done; wait; \
	if ls build/shards/*.sqlite > /dev/null 2>&1; then \
	  $(PY) -m harness merge --join build/shards/*.sqlite -o build/results.sqlite | sed 's/^/  shards: /'; fi; \
	for proc in $$procs; do \
	  echo "-- $$proc: $$(grep -E '(passed|failed|error).* in [0-9.]+s' build/reports/opsuite-$$proc.log \
	    | tail -n 1 | tr -d '=' || true)"; \
	  status=$$(cat build/reports/opsuite-$$proc.status); $(ALLOWED); \
	done; echo "  conformance took $$(( $$(date +%s) - started )) s"
	@echo "[report 1b/5] mutation score: python -m harness mutate (mutants of every table kernel against the eager cases)"
	@status=0; $(PY) -m harness mutate --results build/results.sqlite --json build/reports/mutation.json \
	  > build/reports/mutate.log 2>&1 || status=$$?; grep -E '^  (all|[a-z_0-9]+ +[0-9]+ caught|[0-9]+ of [0-9]+ kernels reached)' build/reports/mutate.log \
	  | head -n 14 || true; $(ALLOWED)
	@echo "[report 2/5] core ATen opset coverage -> build/coverage.json"
	@$(PY) -m device_impl.coverage --json > build/coverage.json.tmp && mv build/coverage.json.tmp build/coverage.json
	@echo "[report 3/5] benchmarks: every quick case in CPU eager and each neuron mode (pytest-benchmark)"
	@status=0; $(PY) -m pytest benches --benchmark-only -v -p no:cacheprovider $(REPORT_BENCH) --tb=no -rN \
	  -o console_output_style=count | awk '/neuron mode \/ CPU eager/ { table = 1 } \
	  table || / (PASSED|FAILED|SKIPPED|ERROR) / { sub(/^benches\/test_modes_benchmark.py::/, "  "); print }' \
	  || status=$$?; $(ALLOWED)
	@echo "[report 4/5] engine timeline of a 512^3 bf16 matmul -> build/traces"
	@$(PY) benches/matmul_timeline.py
	@if ls build/asv/results/*/*.json > /dev/null 2>&1; then echo "  asv results found: asv publish -> build/asv-html"; \
	  $(VENV)/bin/asv publish > build/reports/asv-publish.log 2>&1 || echo "  asv publish failed: build/reports/asv-publish.log"; fi
	@echo "[report 5/5] reports"
	@$(PY) -m reports --store build/results.sqlite --out build/reports | tee build/reports/summary.txt
	@echo "make report took $$(( $$(date +%s) - $$(cat build/reports/.started) )) s"

clean:
	rm -rf build
