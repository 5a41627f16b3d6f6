# make demo: set up everything and run the pipeline on a throwaway server.  make test: the same, then the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: venv mariadb demo test unit check clean

venv: $(VENV)/.installed

# constraints.txt pins the exact versions tested together (pyspark and pyspark-client must agree).
# testing/ is the development helpers' own package (throwaway MariaDB, metastore, Spark cluster, S3): installed
# here for the tests, the demo and the benchmarks, never part of the provider's wheel.
$(VENV)/.installed: pyproject.toml testing/pyproject.toml constraints.txt scripts/ensure-build-deps.sh
	scripts/ensure-build-deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]' -e ./testing
	touch $@

mariadb:
	@scripts/ensure-mariadb.sh $(if $(filter demo,$(MAKECMDGOALS)),--demo)

demo: venv mariadb
	$(BIN)/python scripts/demo.py

test: venv mariadb
	$(BIN)/python -m pytest

unit: venv
	$(BIN)/python -m pytest tests/unit

# The linter, the type checker (strict for core/) and the import contract (core/ stays pure; no import cycles).
check: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .demo .pytest_cache
