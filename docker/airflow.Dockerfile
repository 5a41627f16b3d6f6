# The stack's one image of its own: Airflow 3 with this provider, pyspark's jars and Java. Every JVM and Python of
# the stack that is not MySQL's or PostgreSQL's runs from it: the Airflow services, the Spark master and worker
# (pyspark's spark-class) and the Hive metastore (the Hive 2.3 metastore in pyspark's jars). So the executors'
# Python workers run the driver's Python (3.11) with its packages (pyarrow, pydantic, this provider): a PySpark
# worker of another Python version fails. docker/airflow.Dockerfile.dockerignore keeps the build context small.
FROM apache/airflow:3.3.2-python3.11
USER root
# Java 17 where Debian has it (bookworm), else 21 (trixie has no 17): Spark 4.2 runs on either.
RUN apt-get update \
    && if apt-cache policy openjdk-17-jre-headless | grep -q 'Candidate: [0-9]'; then jre=openjdk-17-jre-headless; \
       else jre=openjdk-21-jre-headless; fi \
    && apt-get install -y --no-install-recommends "$jre" \
    && rm -rf /var/lib/apt/lists/*
USER airflow
COPY --chown=airflow:root pyproject.toml README.md constraints.txt /opt/cdc/
COPY --chown=airflow:root airflow_cdc_provider /opt/cdc/airflow_cdc_provider
# constraints.txt pins the set tested together (Airflow 3.3.2 as in the base image; pyspark and pyspark-client,
# which share one folder, at the same version). The check fails the build, not a task, when one of them is off.
RUN pip install --no-cache-dir -c /opt/cdc/constraints.txt /opt/cdc \
    && python -c "import sys, pyspark, pyarrow, pydantic, airflow_cdc_provider; \
want = [l.split('==')[1].strip() for l in open('/opt/cdc/constraints.txt') if l.startswith('pyspark==')][0]; \
assert sys.version_info[:2] == (3, 11), sys.version; \
assert pyspark.__version__ == want, (pyspark.__version__, want)" \
    && java -version
# The Spark and metastore services' launcher and the volumes' init step (run with `sh`: no executable bit needed).
COPY --chown=airflow:root docker/spark-service.sh docker/init-volumes.sh /opt/cdc/docker/
