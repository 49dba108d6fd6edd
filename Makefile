# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The main job on an embedded default: llama2-tiny, stdlib text, 4 emulated CPU devices.
demo: $(STAMP)
	$(VENV)/bin/obscura compare --demo --out demo_out

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile

clean:
	rm -rf $(VENV) demo_out
