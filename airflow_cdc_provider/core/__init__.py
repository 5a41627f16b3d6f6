"""The pure core: values and rules with no Airflow and no I/O, tested without a server."""
