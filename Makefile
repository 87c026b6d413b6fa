# The two commands: `make run` (main job) and `make test` (test suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# dev: test tools and parity references (torch CPU, transformers); ray: the environment fleet.
EXTRAS ?= dev,ray

.PHONY: run test venv clean

# The stamp is refreshed whenever setup.py changes, so both targets reinstall only when needed.
$(VENV)/.stamp-$(EXTRAS): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

venv: $(VENV)/.stamp-$(EXTRAS)

run: $(VENV)/.stamp-$(EXTRAS)
	$(PY) launch/xm_launch.py

test: $(VENV)/.stamp-$(EXTRAS)
	$(PY) -m pytest -q tests

clean:
	rm -rf $(VENV) runs
