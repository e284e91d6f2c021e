# Two commands for newcomers: `make demo` and `make test`. Everything else is for CI.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Most tests wait on databases and worker processes, so five test processes keep even two
# cores busy: each leg takes 10-20% less time than with three, and no test needs more room.
TEST_WORKERS ?= 5
# Bytecode is written, whatever the environment says: without it every test process
# (five per leg) and every worker or server a test starts compiles the project and
# rewrites each test module's asserts again, about 8 s of CPU per collection.
unexport PYTHONDONTWRITEBYTECODE
# The chaos runs start their own database servers and take minutes: `make chaos-ci` / `make chaos`.
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) -m "not chaos"

.PHONY: demo test test-sqlite test-postgres test-mysql test-pgbouncer schemathesis chaos chaos-ci lint docs dist clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev,postgres,redis,docs]"
	touch $(STAMP)

$(VENV)/.mysql: $(STAMP)
	$(BIN)/python -m pip install -q -e ".[mysql]"
	touch $(VENV)/.mysql

## demo: sample project on SQLite — migrate, admin user, demo data, workers + console on :8000
## (and the API as the demo operator, without credentials, on loopback :8080: an explicit
## opt-in, HEADGATE_DEMO_OPERATOR=1, honoured only with DEBUG on; DEMO_OPERATOR_ADDR= for none)
DEMO_ADDR ?= 127.0.0.1:8000
DEMO_OPERATOR_ADDR ?= 127.0.0.1:8080
demo: $(STAMP)
	$(BIN)/python manage.py migrate --no-input
	HEADGATE_DEMO_OPERATOR=$(if $(DEMO_OPERATOR_ADDR),1,0) $(BIN)/python manage.py rundemo \
	  --seed --addr $(DEMO_ADDR) --operator-addr "$(DEMO_OPERATOR_ADDR)"

## test: the suite on SQLite, plus PostgreSQL / MariaDB when HEADGATE_TEST_POSTGRES / HEADGATE_TEST_MYSQL are set
test: $(STAMP)
	$(MAKE) --no-print-directory test-sqlite
	@if [ -n "$$HEADGATE_TEST_POSTGRES" ]; then $(MAKE) --no-print-directory test-postgres; \
	 else echo "(PostgreSQL leg skipped: set HEADGATE_TEST_POSTGRES to a database URL)"; fi
	@if [ -n "$$HEADGATE_TEST_MYSQL" ]; then $(MAKE) --no-print-directory test-mysql; \
	 else echo "(MariaDB/MySQL leg skipped: set HEADGATE_TEST_MYSQL to a database URL)"; fi

test-sqlite: $(STAMP)
	@echo "== tests on SQLite"
	env -u DATABASE_URL $(PYTEST)

test-postgres: $(STAMP)
	@echo "== tests on PostgreSQL"
	DATABASE_URL="$$HEADGATE_TEST_POSTGRES" $(PYTEST) --create-db

test-mysql: $(VENV)/.mysql
	@echo "== tests on MariaDB/MySQL"
	DATABASE_URL="$$HEADGATE_TEST_MYSQL" $(PYTEST) --create-db

## test-pgbouncer: the integration tests on PostgreSQL through a private PgBouncer in
## transaction pooling mode (needs HEADGATE_TEST_POSTGRES and Debian's pgbouncer)
test-pgbouncer: $(STAMP)
	TEST_WORKERS=$(TEST_WORKERS) $(BIN)/python tests/pooler/run_pgbouncer.py

## schemathesis: every schemathesis check, bounded and seeded, against a live sample-project
## server it starts and stops itself (temporary SQLite, operator token); prints the case count
schemathesis: $(STAMP)
	$(BIN)/python tests/schema/run_schemathesis.py

## chaos: the full chaos run by hand — kills and a restart of a private PostgreSQL under
## 10,000 jobs + 200 DAG + 200 durable workflows for 2 minutes, then the outage scenario.
## Vary it with CHAOS_ARGS, e.g. CHAOS_ARGS="--database mariadb --minutes 1 --jobs 3000".
CHAOS_ARGS ?=
chaos: $(VENV)/.mysql
	$(BIN)/python -m tests.chaos.run $(CHAOS_ARGS)
	$(BIN)/python -m tests.chaos.outage

## chaos-ci: the bounded chaos runs (PostgreSQL, then MariaDB), reports printed
chaos-ci: $(VENV)/.mysql
	$(BIN)/python -m pytest -q -p no:cacheprovider -s -m chaos tests/chaos

## lint: ruff, mypy, migrations in sync
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy headgate_django
	DJANGO_SETTINGS_MODULE=tests.settings $(BIN)/python -m django makemigrations --check --dry-run

docs: $(STAMP)
	$(BIN)/mkdocs build --strict

dist: $(STAMP)
	rm -rf dist build
	$(BIN)/python -m build --wheel --outdir dist .

clean:
	rm -rf $(VENV) .tox build dist site *.egg-info db.sqlite3*
