"""Which pyspark a job's driver imports: the installed package's compiled modules when spark-submit's zips are its
own, the zips of a Spark installed apart otherwise."""

import os
import subprocess
import sys
from pathlib import Path

from airflow_cdc_provider.spark.session import own_zips_dropped


def test_the_zips_of_the_installed_pyspark_are_dropped_and_those_of_another_spark_kept(tmp_path):
    installed = tmp_path / "site" / "pyspark"
    lib = installed / "python" / "lib"
    lib.mkdir(parents=True)
    own = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    apart = ["/opt/spark/python/lib/pyspark.zip", "/opt/spark/python/lib/py4j-0.10.9.9-src.zip"]
    rest = ["/job", str(tmp_path / "site")]
    assert own_zips_dropped([*own, *rest], str(installed), "0.10.9.9") == rest
    assert own_zips_dropped([*apart, *rest], str(installed), "0.10.9.9") == [*apart, *rest]
    # py4j's zip stays when the installed py4j is another version, or none is installed
    assert own_zips_dropped([*own, *rest], str(installed), "0.10.9.7") == [own[1], *rest]
    assert own_zips_dropped([*own, *rest], str(installed), None) == [own[1], *rest]
    # no installed pyspark: nothing is dropped
    assert own_zips_dropped([*own, *rest], None, "0.10.9.9") == [*own, *rest]
    # the same directory reached by a link is the installed one
    os.symlink(tmp_path / "site", tmp_path / "linked")
    linked = str(tmp_path / "linked" / "pyspark" / "python" / "lib" / "pyspark.zip")
    assert own_zips_dropped([linked, *rest], str(installed), "0.10.9.9") == rest


def test_a_driver_started_as_spark_submit_starts_it_imports_the_installed_pyspark():
    """The path spark-submit gives a Python application (its PYTHONPATH: the installed pyspark's zips first)."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = [str(lib / "pyspark.zip"), *map(str, lib.glob("py4j-*-src.zip"))]
    code = ("import sys; from airflow_cdc_provider.spark.session import prefer_installed_pyspark; "
            "prefer_installed_pyspark(); import pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)")
    found = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": os.pathsep.join(zips)},
                           capture_output=True, text=True, check=True).stdout.split()
    assert found == [pyspark.__file__, __import__("py4j").__file__], found
    assert not any(".zip" in path for path in found)
