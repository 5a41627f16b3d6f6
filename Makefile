# make demo: set up everything and run the pipeline on a throwaway server.  make test: the same, then the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: venv mariadb mysql tools demo demo-mysql test test-lowest unit quick check clean

venv: $(VENV)/.installed

# constraints.txt pins the exact versions tested together (pyspark and pyspark-client must agree).
# testing/ is the development helpers' own package (throwaway MariaDB, metastore, Spark cluster, S3): installed
# here for the tests, the demo and the benchmarks, never part of the provider's wheel.
# uv installs the pinned set into the venv (which keeps its pip): on two cores from an empty cache, 41 s against
# pip's 125 s, and the lowest Airflow's environment then takes the shared packages from uv's cache.
# --compile-bytecode writes every installed module's bytecode once: where PYTHONDONTWRITEBYTECODE is set (it is on
# the machines here), every process would otherwise compile Airflow, PySpark and the rest from source again, about
# two seconds of CPU per Python process (tasks, DAG parses, Spark's Python side), on a suite of many of them.
UV := uv==0.13.9
UV_INSTALL = uv pip install --quiet --compile-bytecode
# PySpark ships as a source distribution only: uv builds it at each install and keeps the build, 1.4 to 1.9 GB, in its
# cache, under a new revision each time on these machines (the suite's own installs do not reuse it). Dropped when
# the suite is over (no install runs then), or a machine's clones and CI runs fill its disk (seen here: 56 GB of
# them, and a suite failing for space).
UV_FORGET_SPARK = uv cache clean --quiet pyspark pyspark-client
# An editable install leaves the build's metadata (*.egg-info) in the source tree, where every Python process started
# in it (the tests' runs) finds the distribution a second time, beside its installed metadata: Airflow then loads the
# provider's plugin twice and records the second as an import error. The installed metadata is the one that counts.
DROP_EGG_INFO = rm -rf airflow_cdc_provider.egg-info testing/airflow_cdc_testing.egg-info
# The project's own modules too (editable installs are left as source); again before each suite: only what changed.
COMPILE_SOURCES = -m compileall -q -j 0 airflow_cdc_provider testing tests dags bench scripts

$(VENV)/.installed: pyproject.toml testing/pyproject.toml constraints.txt scripts/ensure-build-deps.sh scripts/ensure-java.sh
	scripts/ensure-build-deps.sh
	scripts/ensure-java.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check $(UV)
	$(BIN)/$(UV_INSTALL) --python $(BIN)/python -c constraints.txt -e '.[test]' -e ./testing
	$(DROP_EGG_INFO)
	touch $@

mariadb:
	@scripts/ensure-mariadb.sh $(if $(filter demo,$(MAKECMDGOALS)),--demo)

# MySQL 9.7 for the tests and `make demo-mysql`: Debian's own package from its sid suite, in a minimal Debian root
# made once per clone (.mysql-root, about 650 MB; under a minute to a few, by the mirror), run under chroot.
mysql:
	@scripts/ensure-mysql.sh

# What the tests run besides the provider: pt-online-schema-change against the server, and a headless chromium
# with its driver for the CDC tables page.
tools:
	@scripts/ensure-percona-toolkit.sh
	@scripts/ensure-chromium.sh

demo: venv mariadb
	$(BIN)/python scripts/demo.py

# The same on a throwaway MySQL 9.7 (make mysql).
demo-mysql: venv mysql
	CDC_DEMO_SERVER=mysql $(BIN)/python scripts/demo.py

# The checks first (seconds), then the suite; beside it, in the background, the lowest supported Airflow's
# environment and tests (test-lowest, logged to .venv-lowest.log): both must pass.
# One worker per core (pytest-xdist): the end-to-end tests spend a third of their time waiting on processes they
# started. tests/conftest.py orders the tests longest first and keeps a module that shares a server on one worker.
WORKERS ?= auto

test: venv mariadb mysql tools check
	$(BIN)/python $(COMPILE_SOURCES)
	@$(MAKE) --no-print-directory test-lowest > $(LOWEST).log 2>&1 & lowest=$$!; \
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup --no-loadscope-reorder; suite=$$?; \
	wait $$lowest; low=$$?; \
	$(BIN)/$(UV_FORGET_SPARK); \
	echo "== the lowest supported Airflow (make test-lowest): exit $$low; its log: $(LOWEST).log"; \
	tail -n 40 $(LOWEST).log; \
	test $$suite -eq 0 && test $$low -eq 0

# The lowest Airflow the provider supports (constraints-lowest.txt), in an environment of its own: the unit tests
# of what uses Airflow (--airflow-facing: the core's run the same on either) and one real `airflow dags test` run
# of the example DAG (check → snapshot → merge → commit).
LOWEST ?= .venv-lowest

$(LOWEST)/.installed: pyproject.toml testing/pyproject.toml constraints-lowest.txt scripts/ensure-build-deps.sh scripts/ensure-java.sh
	scripts/ensure-build-deps.sh
	scripts/ensure-java.sh
	test -x $(LOWEST)/bin/python || $(PYTHON) -m venv $(LOWEST)
	$(LOWEST)/bin/pip install --quiet --disable-pip-version-check $(UV)
	$(LOWEST)/bin/$(UV_INSTALL) --python $(LOWEST)/bin/python -c constraints-lowest.txt -e '.[test]' \
		-e ./testing
	$(DROP_EGG_INFO)
	touch $@

test-lowest: $(LOWEST)/.installed mariadb
	$(LOWEST)/bin/python -m pytest -p no:cacheprovider --airflow-facing tests/unit \
		tests/e2e/test_example_dag.py::test_example_dag_loads_each_table_in_a_real_cli_run

# The unit tests alone (no server, no Spark, no Airflow run), a minute or so.
unit: venv
	$(BIN)/python -m pytest -m "not integration and not e2e"

# The unit tests and the integration tests that start no Spark (capture against a real server): a few minutes.
quick: venv mariadb
	$(BIN)/python -m pytest -m "not e2e and not spark"

# The linter, the type checker (strict for core/) and the import contract (core/ stays pure; no import cycles).
check: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) $(LOWEST) $(LOWEST).log .demo .pytest_cache .mysql-root .mysql-root.log
