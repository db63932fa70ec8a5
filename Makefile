# django-pgqueue developer commands. Everything runs in .venv (Python 3.12),
# created on first use; with DATABASE_URL unset an embedded PostgreSQL 18.6 is used.
SHELL := /bin/bash
PYTHON_VERSION ?= 3.12
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help venv browser pgbouncer test test-fast test-django lint demo lab admin bench docs check-wheel clean

help:
	@echo "make demo   run the example project's queue end to end"
	@echo "make test   run the whole test suite (ruff, mypy, pytest)"
	@echo "make test-django DJANGO=5.2   the fast tests on another Django (5.2 or 6.0)"
	@echo "make lint   ruff and mypy only"
	@echo "make admin  serve the example project's admin (admin/admin)"
	@echo "make lab    the design article's lab through the Python API"
	@echo "make docs   build the Sphinx docs (warnings are errors)"
	@echo "make bench  run the benchmarks (benchmarks/results/latest.md)"

$(PY):
	@py=""; \
	for c in "$$(command -v python$(PYTHON_VERSION) || true)" \
	         $$(command -v pyenv >/dev/null && ls -d "$$(pyenv root)"/versions/$(PYTHON_VERSION).*/bin/python$(PYTHON_VERSION) 2>/dev/null | sort -V -r); do \
	  if [ -n "$$c" ] && "$$c" -c 'import sys' 2>/dev/null; then py="$$c"; break; fi; \
	done; \
	if [ -z "$$py" ]; then echo "Python $(PYTHON_VERSION) not found: install it or set PYTHON_VERSION"; exit 1; fi; \
	echo "creating $(VENV) with $$py"; "$$py" -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e . --group dev --group docs
	@touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy django_pgqueue tests devtools example_project benchmarks

# The admin's browser test drives Debian's Chromium (apt, never a browser download).
# As root it is installed when missing; elsewhere the test skips unless CI is set.
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium and chromium-driver from apt"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "chromium/chromedriver missing: the browser test will skip (or fail when CI is set)"; fi; \
	fi

# The pooler tests (tests/cluster) run Debian's PgBouncer, installed the same way.
pgbouncer:
	@if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing pgbouncer from apt"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null; \
	  else echo "pgbouncer missing: the pooler tests will skip (or fail when CI is set)"; fi; \
	fi

# Settings start no server (mypy imports tests.settings); pytest starts its own
# (devtools/pytest_plugin.py), makemigrations gets one from devtools.with_pg.
# Branch coverage of the package, worker subprocesses included; the floor is what
# the suite reaches, so it can only rise.
COVERAGE_FLOOR ?= 93

test: $(STAMP) lint browser pgbouncer
	$(PY) -m devtools.with_pg -m django makemigrations --check --dry-run --settings=tests.settings
	$(PY) -m pytest --cov --cov-report=term --cov-fail-under=$(COVERAGE_FLOOR) $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# Another Django of the support matrix, on the fast tests (tox runs every test on
# every pair): make test-django DJANGO=5.2 (with the django-tasks backport) or 6.0.
# Its own venv, .venv-django5.2 and so on, from the same Python as .venv.
DJANGO ?= 5.2
DJANGO_VENV := $(VENV)-django$(DJANGO)
test-django: $(PY)
	@if [ ! -f $(DJANGO_VENV)/.installed ] || [ pyproject.toml -nt $(DJANGO_VENV)/.installed ]; then \
	  echo "creating $(DJANGO_VENV) with Django $(DJANGO)"; \
	  "$$($(PY) -c 'import sys; print(sys._base_executable)')" -m venv $(DJANGO_VENV) && \
	  $(DJANGO_VENV)/bin/python -m pip install -q --upgrade pip && \
	  $(DJANGO_VENV)/bin/python -m pip install -q -e "$(if $(filter 5.2,$(DJANGO)),.[backport],.)" \
	    --group test "Django~=$(DJANGO).0" && touch $(DJANGO_VENV)/.installed; \
	fi
	$(DJANGO_VENV)/bin/python -c 'import django; print("Django", django.get_version())'
	$(DJANGO_VENV)/bin/python -W error::DeprecationWarning -m pytest -m "not slow" $(PYTEST_ARGS)

demo: $(STAMP)
	$(PY) -m devtools.demo

lab: $(STAMP)
	$(PY) -m devtools.lab

admin: $(STAMP)
	@echo "admin: http://127.0.0.1:8000/admin/ (admin / admin, local use only); Ctrl-C stops"
	$(PY) -m devtools.with_pg --demo-data manage.py runserver --noreload 127.0.0.1:8000

BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e . --group dev --group docs --group bench
	@touch $(BENCH_STAMP)

# Benchmarks, not tests: prints a markdown table, writes benchmarks/results/latest.md.
# On a durable embedded server unless BENCH_FSYNC=off (or DATABASE_URL is set).
bench: $(BENCH_STAMP)
	$(PY) -m benchmarks $(BENCH_ARGS)

docs: $(STAMP)
	$(VENV)/bin/sphinx-build -q -E -W --keep-going -b html docs docs/_build/html
	@echo "docs built: docs/_build/html/index.html"

check-wheel: $(STAMP)
	$(PY) -m devtools.check_wheel

clean:
	rm -rf $(VENV) build dist *.egg-info
