# The two commands of the README: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-fast soak ui stack stack-down clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@command -v java >/dev/null && command -v javac >/dev/null && command -v mvn >/dev/null || { \
	  echo "rocketlake needs a JDK 17 and Maven: apt-get install openjdk-17-jdk-headless maven" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

demo: setup
	$(BIN)/rocketlake demo

test: setup
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  echo "the UI test needs a headless browser: apt-get install chromium chromium-driver" >&2; exit 1; }
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null || { \
	  echo "the deployed-stack test needs PostgreSQL's programs: apt-get install postgresql" >&2; exit 1; }
	$(BIN)/python -m pytest -n 2 --dist loadfile

# The pure-logic tier alone (tests/conftest.py TIERS): no broker, Spark or Dagster run; under a minute.
test-fast: setup
	$(BIN)/python -m pytest -m unit

# The crash trials at 50 random instants (CI runs 4); ROCKETLAKE_CRASH_SEED=<seed> replays a printed run.
soak: setup
	ROCKETLAKE_CRASH_TRIALS=$${ROCKETLAKE_CRASH_TRIALS:-50} $(BIN)/python -m pytest \
	  tests/integration/test_crash_recovery.py -k random_instants

# The demo's instance, with the demo's configuration and its downstream asset once `make demo` has written it.
ui: setup
	mkdir -p .rocketlake/dagster
	test -f .rocketlake/dagster/dagster.yaml || cp rocketlake/dagster.yaml .rocketlake/dagster/dagster.yaml
	if test -z "$$ROCKETLAKE_CONFIG" && test -f .rocketlake/demo/rocketlake.yaml; then \
	  DAGSTER_HOME=$(CURDIR)/.rocketlake/dagster ROCKETLAKE_CONFIG=.rocketlake/demo/rocketlake.yaml \
	    $(BIN)/dagster dev -m rocketlake.demo_definitions; \
	else \
	  DAGSTER_HOME=$(CURDIR)/.rocketlake/dagster ROCKETLAKE_CONFIG=$${ROCKETLAKE_CONFIG:-rocketlake.yaml} \
	    $(BIN)/dagster dev -w workspace.yaml; \
	fi

# Everything as production runs it, on this machine: brokers, a Spark standalone cluster, PostgreSQL, dagster-daemon
# and dagster-webserver (http://127.0.0.1:3000) with the schedules on, loading deploy/rocketlake.yaml.
stack: setup
	$(BIN)/rocketlake local up --stack

stack-down:
	$(BIN)/rocketlake local down --stack

clean:
	-$(BIN)/rocketlake local down --wipe
	rm -rf $(VENV) .rocketlake
