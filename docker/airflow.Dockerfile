# Airflow 3 with this provider installed, and Java for spark-submit.
FROM apache/airflow:3.3.2-python3.11
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
USER airflow
COPY --chown=airflow:root pyproject.toml README.md constraints.txt /opt/cdc/
COPY --chown=airflow:root airflow_cdc_provider /opt/cdc/airflow_cdc_provider
RUN pip install --no-cache-dir -c /opt/cdc/constraints.txt /opt/cdc
