# The two commands: `make run` (main job) and `make test` (test suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Extras per target. test: dev (test tools; torch CPU + transformers as parity references),
# ray (the environment fleet), seqio (T5X-style data sources) and serve (the endpoint and the
# openai client), so every test runs in CI.
RUN_EXTRAS ?= ray
TEST_EXTRAS ?= dev,ray,seqio,serve

.PHONY: run test clean

# One stamp per extras set, refreshed whenever setup.py changes: reinstall only when needed.
$(VENV)/.stamp-%: setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$*]"
	touch $@

run: $(VENV)/.stamp-$(RUN_EXTRAS)
	$(PY) launch/xm_launch.py

# --durations: CI prints the slowest tests, so the suite can be kept inside its 40-minute budget.
test: $(VENV)/.stamp-$(TEST_EXTRAS)
	$(PY) -m pytest -q --durations=30 tests

clean:
	rm -rf $(VENV) runs
