# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# `make test-gpu PY=python3` runs with an interpreter that already has the dependencies
# (a GPU machine without network access): the venv is made only when PY is the venv's.
NEEDS  := $(if $(filter $(VENV)/bin/python,$(PY)),$(STAMP))

.PHONY: demo test test-long test-gpu test-busy install bytecode clean

# Bytecode on both cores, without the installed packages' own test folders (pip's compile
# is serial and takes them all: a fresh venv 45 s -> 28 s here, BENCHMARKS.md "Test suite time")
# nor the packages no process of ours imports (pip, setuptools, scipy: ~2 s more).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -e '.[test]'
	$(PY) -m compileall -q -j 0 -x 'site-packages/(pip|setuptools|pkg_resources|scipy)/|site-packages/.*/tests/' $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') >/dev/null \
	  || echo "make: some installed modules did not byte-compile (they compile when imported)"
	touch $(STAMP)

install: $(STAMP)

# The repository's own modules byte-compiled before a run: where PYTHONDONTWRITEBYTECODE
# is set, every process the suite starts would compile them from source again (~0.16
# CPU-s a CLI process). Only what changed since the last run is compiled again.
OWN_PACKAGES := obscura_jax models schedules planner experiments scripts examples tests
bytecode: $(STAMP)
	$(PY) -m compileall -q -j 0 $(OWN_PACKAGES) >/dev/null

# The main job on an embedded default: llama2-tiny, stdlib text, 4 emulated CPU devices.
demo: $(STAMP)
	$(VENV)/bin/obscura compare --demo --out demo_out

# The suite's workers: one test module at a time each, dealt in tests/conftest.py's
# order (heaviest first); without --no-loadscope-reorder xdist deals by test count.
# Three workers on a 2-core CPU machine: many tests wait (processes on each other, a
# watchdog's heartbeat, a child's start-up), and a third worker keeps both cores busy
# meanwhile (BENCHMARKS.md "Test suite time": the same tree back to back, -n 2 8:18 against
# -n 3 7:29; the fresh-clone runs there).
XDIST := -n 3 --dist loadfile --no-loadscope-reorder

# The whole suite on 3 workers; GPU-marked tests skip without a GPU; hypothesis's quick profile.
test: bytecode
	$(PY) -m pytest -q $(XDIST)

# The same with hypothesis's thorough profile (10x the examples: tests/conftest.py, tests/budget.py).
test-long: bytecode
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -q $(XDIST)

# Only the GPU tier (tests/gpu/ and any test marked gpu): skips cleanly without a GPU;
# none collected (pytest's exit 5) is said, not an error. Four at a time on the one GPU,
# then alone the tests whose verdicts compare measured times (the engine benchmark, the
# profiler's fields: another process's kernels on the GPU would be in them); ~6 min on an H200.
GPU_TIMED := engine or profiler
test-gpu: $(NEEDS)
	$(PY) -m pytest -q -m gpu -n 4 -k "not ($(GPU_TIMED))"; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-gpu: no gpu tests collected"; elif [ $$rc -ne 0 ]; then exit $$rc; fi
	$(PY) -m pytest -q -m gpu -k "$(GPU_TIMED)"; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-gpu: no timed gpu test collected"; else exit $$rc; fi

# The suite beside 6 CPU-burning processes it starts and stops (scripts/bench/busy_load.py):
# no verdict may depend on the machine's speed.
test-busy: bytecode
	$(PY) scripts/bench/busy_load.py --procs 6 --timeout 5400 -- $(PY) -m pytest -q $(XDIST)

# (.obscura.lock-demo_out: what a demo of an earlier version left beside demo_out)
clean:
	rm -rf $(VENV) demo_out .obscura.lock-demo_out
