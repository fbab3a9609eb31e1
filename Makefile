# The two commands of the README: `make run` and `make test`. Everything else supports them.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run test bench lint migrate worker clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev]" 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -c "import django, celery, rest_framework, psycopg, pytest_django"
	touch $(STAMP)

install: $(STAMP)

migrate: $(STAMP)
	$(BIN)/python manage.py migrate --noinput

# Embedded default: SQLite under var/, Celery tasks in-process. Demo data goes through the event intake.
run: migrate
	$(BIN)/python manage.py load_demo --login
	@echo "FleetOps on http://$(HOST):$(PORT)/  (API docs: http://$(HOST):$(PORT)/api/v1/docs)"
	$(BIN)/python manage.py runserver $(HOST):$(PORT)

# With DATABASE_URL and REDIS_URL set, the service tests run against PostgreSQL, Redis and a real worker.
test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m pytest tests/benchmarks -q -s --override-ini="addopts="

lint: $(STAMP)
	$(BIN)/ruff check .

worker: $(STAMP)
	$(BIN)/celery -A fleetops worker --beat --loglevel=INFO

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
