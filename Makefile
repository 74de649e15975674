# The two commands of the README: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-fast ui clean

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
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -m "not integration"

# The demo's instance, with the demo's configuration once `make demo` has written it.
ui: setup
	mkdir -p .rocketlake/dagster
	test -f .rocketlake/dagster/dagster.yaml || cp rocketlake/dagster.yaml .rocketlake/dagster/dagster.yaml
	DAGSTER_HOME=$(CURDIR)/.rocketlake/dagster \
	ROCKETLAKE_CONFIG=$${ROCKETLAKE_CONFIG:-$$(test -f .rocketlake/demo/rocketlake.yaml && echo .rocketlake/demo/rocketlake.yaml || echo rocketlake.yaml)} \
	$(BIN)/dagster dev -w workspace.yaml

clean:
	-$(BIN)/rocketlake local down --wipe
	rm -rf $(VENV) .rocketlake
