# The two commands of the README: `make run` and `make test`. Everything else supports them.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
BENCH_STAMP := $(VENV)/.bench-stamp
# The benchmarks' own database unless DATABASE_URL names another (docs/PERFORMANCE.md).
BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/fleetops_bench
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

# The benchmark extra (Google's ml-goodput-measurement, the baseline) is installed here only, never for `make test`.
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev,bench]" 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -c "import ml_goodput_measurement.src.goodput"
	touch $(BENCH_STAMP)

# Figures, not tests: see docs/PERFORMANCE.md. The first run loads the 54-day simulated run (minutes); later runs keep it.
bench: $(BENCH_STAMP)
	DATABASE_URL="$${DATABASE_URL:-$(BENCH_DATABASE_URL)}" \
		$(BIN)/python -m pytest tests/benchmarks -q -s -p no:cacheprovider --override-ini="addopts="

lint: $(STAMP)
	$(BIN)/ruff check .

worker: $(STAMP)
	$(BIN)/celery -A fleetops worker --beat --loglevel=INFO \
		-Q "$$($(BIN)/python -c 'import django, os; os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleetops.settings"); django.setup(); from django.conf import settings; print(",".join(settings.FLEETOPS_QUEUES))')"

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
