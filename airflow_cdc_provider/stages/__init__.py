"""The pipeline stages as plain Python (no Airflow): what each operator runs."""
