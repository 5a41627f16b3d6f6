"""Apache Airflow provider that keeps Hive tables in step with MySQL tables by reading the MySQL binlog."""

__version__ = "0.1.0"
