# The two commands of the README: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# uv itself, in a folder of its own (the registry's wheel; no system install): it installs the locked environment.
UV_VERSION := 0.13.9
UV := .uv/bin/uv
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: setup demo test test-fast test-lowest soak chaos chaos-short ui docs stack stack-down clean

setup: $(VENV)/.installed

$(UV):
	$(PYTHON) -m venv .uv
	.uv/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# The development environment is uv.lock, exactly (`--locked` fails if pyproject.toml changed without `uv lock`).
# Byte-compiled at install, with the project's own folders: where PYTHONDONTWRITEBYTECODE is set (CI images, this
# project's machine), every Python process would otherwise compile each module it imports from source, which more
# than doubles the start of Dagster's processes, the CLI's and the tests'.
$(VENV)/.installed: pyproject.toml uv.lock | $(UV)
	@command -v java >/dev/null && command -v javac >/dev/null && command -v mvn >/dev/null || { \
	  echo "rocketlake needs a JDK 17 and Maven: apt-get install openjdk-17-jdk-headless maven" >&2; exit 1; }
	$(UV) sync --locked --quiet --compile-bytecode
	$(BIN)/python -m compileall -q -j 0 rocketlake assets pipelines resources tests benchmarks
	touch $@

# `make demo S3=1`: the same, landed in the local S3 server's bucket (rocketlake local up --s3).
demo: setup
	$(BIN)/rocketlake demo $(if $(S3),--s3)

test: setup
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  echo "the UI test needs a headless browser: apt-get install chromium chromium-driver" >&2; exit 1; }
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null || { \
	  echo "the deployed-stack test needs PostgreSQL's programs: apt-get install postgresql" >&2; exit 1; }
	@ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || { \
	  echo "the broker-clock test starts a broker on a shifted clock: apt-get install libfaketime" >&2; exit 1; }
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder

# The lowest versions of every range in pyproject.toml (uv's lowest-direct resolution) in an environment of their own,
# through the unit and engine tiers and the Dagster CLI's run of a window. Not part of `make test`; CI runs it after.
test-lowest: $(UV)
	$(UV) venv --quiet --allow-existing .venv-lowest
	$(UV) pip install --quiet --compile-bytecode --python .venv-lowest/bin/python --resolution lowest-direct -e . --group test --group docs
	.venv-lowest/bin/python -c "import dagster, pyspark, delta, deltalake; print('lowest:', 'dagster', dagster.__version__, \
	  'pyspark', pyspark.__version__, 'deltalake', deltalake.__version__)"
	.venv-lowest/bin/python -m pytest -n 2 --dist loadfile -m "unit or engine" -p no:cacheprovider

# The documentation site (MkDocs, Material theme) into site/; --strict: a broken link or anchor fails the build.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet -d site
	@echo "open site/index.html"

# The pure-logic tier alone (tests/conftest.py TIERS): no broker, Spark or Dagster run; under a minute.
test-fast: setup
	$(BIN)/python -m pytest -m unit

# The crash trials at 50 random instants (CI runs 2); ROCKETLAKE_CRASH_SEED=<seed> replays a printed run.
soak: setup
	ROCKETLAKE_CRASH_TRIALS=$${ROCKETLAKE_CRASH_TRIALS:-50} $(BIN)/python -m pytest \
	  tests/integration/test_crash_recovery.py -k random_instants

# The chaos soak (tests/chaos/soak.py): the daemon-driven pipeline for 60 minutes under faults drawn from a printed
# seed (brokers killed and paused, runs killed, the member and the Spark server restarted, a broker's clock stepped),
# then every invariant checked on the end state: 60 minutes, then the drain (at most 10). `make chaos SEED=<seed>`
# replays a schedule.
chaos: setup
	@command -v faketime >/dev/null || { echo "the clock step needs libfaketime: apt-get install faketime" >&2; exit 1; }
	$(BIN)/python -m tests.chaos.soak --minutes $${CHAOS_MINUTES:-60} $(if $(SEED),--seed $(SEED))

# Its short version with two faults (a run killed in its send-back, broker-a killed for a minute), on the suite's
# fixtures, alone: 3 minutes of producing, about 6.5 with its drain. `make test` runs it too.
chaos-short: setup
	$(BIN)/python -m pytest tests/chaos -s -p no:cacheprovider

# The Dagster UI (dg dev) on the local instance; after `make demo`, the demo's, with orders flowing and windows landing.
ui: setup
	$(BIN)/rocketlake ui

# Everything as production runs it, on this machine: brokers, a Spark standalone cluster, PostgreSQL, dagster-daemon
# and dagster-webserver (http://127.0.0.1:3000) with the schedules on, loading deploy/rocketlake.yaml.
stack: setup
	$(BIN)/rocketlake local up --stack

stack-down:
	$(BIN)/rocketlake local down --stack

clean:
	-$(BIN)/rocketlake local down --wipe
	rm -rf $(VENV) .venv-lowest .uv .rocketlake
