# The two commands of the README: `make run` and `make test`. Everything else supports them.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
BENCH_STAMP := $(VENV)/.bench-stamp
TEST_STAMP := $(VENV)/.test-stamp
# The benchmarks' own database unless DATABASE_URL names another (docs/PERFORMANCE.md).
BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/fleetops_bench
# The pipeline benchmarks' broker unless REDIS_URL names another: they purge its FleetOps queues.
BENCH_REDIS_URL ?= redis://127.0.0.1:6379/14
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run demo-fault test bench fuzz lint migrate worker clean reliability-doc lock audit screenshots

# Installs exactly the versions in requirements.lock (`make lock` writes it; `make audit` checks it).
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e ".[dev]" 2>&1 \
		| grep -v "is ignored" || true
	$(BIN)/python -c "import django, celery, rest_framework, psycopg, pytest_django"
	touch $(STAMP)

install: $(STAMP)

migrate: $(STAMP)
	$(BIN)/python manage.py migrate --noinput

# Embedded default: SQLite under var/, a Celery worker with beat beside the web server on a broker folder under var/
# (manage.py serve; Ctrl-C, SIGTERM or SIGHUP stops all three). Demo data goes through the event intake; loaded again
# at each start it stores nothing twice, prints the same login (var/demo-login) and opens no new incident. `exec`: the
# shell gives way to serve, so that a SIGTERM to make (which make passes to its recipe's process) reaches it.
# MAKE_RUN_URL: unless PUBLIC_URL says otherwise, the links in its notifications (the demo's e-mails under var/mail/)
# lead where it serves.
run: export MAKE_RUN_URL = http://$(HOST):$(PORT)
run: migrate
	$(BIN)/python manage.py load_demo --login
	@echo "FleetOps on http://$(HOST):$(PORT)/  (API docs: http://$(HOST):$(PORT)/api/v1/docs)"
	DEMO_FEED=true CELERY_TASK_ALWAYS_EAGER=false exec $(BIN)/python manage.py serve $(HOST):$(PORT)

# A new fault on the demo's run now (a GPU falls off the bus), as the first `make run` leaves one: a restart adds none.
# While `make run` serves, FleetOps drains the node and the feed heals the run as it did the first. None while the
# last one is still open.
demo-fault: migrate
	$(BIN)/python manage.py load_demo --fault

# With DATABASE_URL and REDIS_URL set, the service tests run against PostgreSQL, Redis and a real worker.
# PyTorch (CPU), Lightning and Transformers, for the training client's tests, are installed here only, never for
# `make run`.
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e ".[dev,training]" 2>&1 \
		| grep -v "is ignored" || true
	$(BIN)/python -c "import torch, numpy, lightning, transformers, accelerate, xdist"
	touch $(TEST_STAMP)

# Two passes (tests/conftest.py says which tests are serial): the others on TEST_WORKERS workers, then the serial ones
# one at a time, as they would run alone. It fails if either pass fails.
TEST_WORKERS ?= 2
test: $(TEST_STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m "not serial"; parallel=$$?; \
	$(BIN)/python -m pytest -m serial; serial=$$?; \
	[ $$parallel -eq 0 ] && [ $$serial -eq 0 ]

# The benchmark extra (Google's ml-goodput-measurement, the baseline) is installed here only, never for `make test`;
# the training extra for the restart-loss benchmark's real job.
$(BENCH_STAMP): $(TEST_STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e ".[dev,bench,training]" \
		2>&1 | grep -v "is ignored" || true
	$(BIN)/python -c "import ml_goodput_measurement.src.goodput, torch"
	touch $(BENCH_STAMP)

# Figures, not tests: see docs/PERFORMANCE.md. The first run loads the 54-day simulated run (minutes); later runs keep it.
# From the system's packages, installed here when missing: wrk (the pages benchmark's load generator) and Slurm (the
# restart-loss benchmark's loopback cluster).
BENCH_DEBS := $(if $(shell command -v wrk),,wrk) $(if $(wildcard /usr/bin/chromium),,chromium) $(if $(shell command -v slurmctld),,slurm-wlm slurmrestd munge)
bench: $(BENCH_STAMP)
	@[ -z "$(strip $(BENCH_DEBS))" ] || { echo "Installing $(strip $(BENCH_DEBS))"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get install -y -qq $(BENCH_DEBS) >/dev/null 2>&1 || { $$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(BENCH_DEBS) >/dev/null; }; }
	DATABASE_URL="$${DATABASE_URL:-$(BENCH_DATABASE_URL)}" REDIS_URL="$${REDIS_URL:-$(BENCH_REDIS_URL)}" \
		$(BIN)/python -m pytest tests/benchmarks -q -s -p no:cacheprovider --override-ini="addopts="

# The goodput engine against the reference model on 50,000 random messy streams (make test draws 2,000): about 2 h.
fuzz: $(STAMP)
	FLEETOPS_FUZZ_EXAMPLES=$${FLEETOPS_FUZZ_EXAMPLES:-50000} $(BIN)/python -m pytest \
		tests/runs/test_goodput_differential.py -q -p no:cacheprovider --override-ini="addopts=" -x

# The README's pictures of the console (docs/screenshots/), taken by the browser tests that check every page at a
# phone's and a desk's width (tests/browser/test_console_layout.py) in Debian's Chromium, installed here when missing.
screenshots: $(TEST_STAMP)
	@[ -x /usr/bin/chromium ] || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); $$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }
	mkdir -p docs/screenshots
	SCREENSHOTS_DIR=$(CURDIR)/docs/screenshots $(BIN)/python -m pytest tests/browser/test_console_layout.py -q \
		-p no:cacheprovider --override-ini="addopts=" -k "fits_the_screen or keyboard"

# docs/RELIABILITY.md's table, from the tests' @pytest.mark.reliability marks (tests/test_reliability_doc.py checks it).
reliability-doc: $(STAMP)
	$(BIN)/python -m tests.test_reliability_doc --write

# requirements.lock: the exact versions pip resolves for `.[dev,training]` (production and test dependencies), written from
# pip's own resolver report, so it is what a fresh `make install` gets. Run after changing pyproject.toml.
lock: $(STAMP)
	$(BIN)/python -m pip install --dry-run --ignore-installed --quiet --disable-pip-version-check \
		--report $(VENV)/lock-report.json -e ".[dev,training]" 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -c 'import json, sys; r = json.load(open(sys.argv[1])); \
		rows = sorted((i["metadata"]["name"].lower().replace("_", "-"), i["metadata"]["version"]) \
		for i in r["install"] if not i.get("is_direct")); \
		print("# make lock: what pip resolves for .[dev,training]; make audit checks it for known vulnerabilities"); \
		print("\n".join(f"{n}=={v}" for n, v in rows))' $(VENV)/lock-report.json > requirements.lock

# Known vulnerabilities in requirements.lock (PyPI's advisory data; AUDIT_OSV_URL=<an OSV mirror>/v1/query to use
# OSV). --strict: a package that could not be checked fails too, never a silent pass.
audit: $(STAMP)
	$(BIN)/pip-audit -r requirements.lock --no-deps --disable-pip --strict --progress-spinner off \
		$${AUDIT_OSV_URL:+--vulnerability-service osv --osv-url $$AUDIT_OSV_URL}

lint: $(STAMP)
	$(BIN)/ruff check .

worker: $(STAMP)
	$(BIN)/celery -A fleetops worker --beat --loglevel=INFO \
		-Q "$$($(BIN)/python -c 'import django, os; os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleetops.settings"); django.setup(); from django.conf import settings; print(",".join(settings.FLEETOPS_QUEUES))')"

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
