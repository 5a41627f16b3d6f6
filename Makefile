# make demo: set up everything and run the pipeline on a throwaway server.  make test: the same, then the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: venv mariadb demo test test-lowest unit clean

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
	$(MAKE) test-lowest

# The lowest Airflow the provider supports (constraints-lowest.txt), in an environment of its own: the unit tests
# and one real `airflow dags test` run of the example DAG (check → snapshot → merge → commit).
LOWEST ?= .venv-lowest

$(LOWEST)/.installed: pyproject.toml constraints-lowest.txt scripts/ensure-build-deps.sh
	scripts/ensure-build-deps.sh
	test -x $(LOWEST)/bin/python || $(PYTHON) -m venv $(LOWEST)
	$(LOWEST)/bin/pip install --quiet --disable-pip-version-check -c constraints-lowest.txt -e '.[test]'
	touch $@

test-lowest: $(LOWEST)/.installed mariadb
	$(LOWEST)/bin/python -m pytest -p no:cacheprovider tests/unit \
		tests/e2e/test_example_dag.py::test_example_dag_loads_each_table_in_a_real_cli_run

unit: venv
	$(BIN)/python -m pytest tests/unit

clean:
	rm -rf $(VENV) $(LOWEST) .demo .pytest_cache
