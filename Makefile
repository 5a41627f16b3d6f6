# make demo: set up everything and run the pipeline on a throwaway server.  make test: the same, then the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: venv mariadb demo test unit quick clean

venv: $(VENV)/.installed

# constraints.txt pins the exact versions tested together (pyspark and pyspark-client must agree).
$(VENV)/.installed: pyproject.toml constraints.txt scripts/ensure-build-deps.sh
	scripts/ensure-build-deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $@

mariadb:
	@scripts/ensure-mariadb.sh $(if $(filter demo,$(MAKECMDGOALS)),--demo)

demo: venv mariadb
	$(BIN)/python scripts/demo.py

test: venv mariadb
	$(BIN)/python -m pytest

# The unit tests alone (no server, no Spark, no Airflow run), a minute or so.
unit: venv
	$(BIN)/python -m pytest -m "not integration and not e2e"

# The unit tests and the integration tests that start no Spark (capture against a real server): a few minutes.
quick: venv mariadb
	$(BIN)/python -m pytest -m "not e2e and not spark"

clean:
	rm -rf $(VENV) .demo .pytest_cache
