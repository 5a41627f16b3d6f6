"""The PySpark applications the provider submits, and what they share. Run by spark-submit, not imported by Airflow."""

from pathlib import Path

MERGE_JOB = str(Path(__file__).with_name("merge_job.py"))
VERIFY_JOB = str(Path(__file__).with_name("verify_job.py"))
DIGESTS_JOB = str(Path(__file__).with_name("digests_job.py"))
