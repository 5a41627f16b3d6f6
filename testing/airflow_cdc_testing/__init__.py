"""What the tests, the demo and the benchmarks run the provider against, on one machine: a throwaway MariaDB with a
row binlog (``server``), a Hive metastore service and a Spark standalone cluster from pip pyspark's jars
(``cluster``), an S3 server on loopback (``s3``), and reading Hive tables back (``hive``, ``read_table_job``).

A package of its own, beside the provider and never in its wheel: `make` installs it (editable) into the
development environment only.
"""
