"""What operators see: every table's status (``airflow cdc status``) and the CDC tables page in Airflow's UI."""
