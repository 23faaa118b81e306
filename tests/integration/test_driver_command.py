"""shared.levers.driver_command writes each worker's driver command as Spark's own
launcher does: spark-submit (its scripts and its launcher JVM) is run here
with a stand-in for `java` that runs the launcher and records the command
it is then given to run instead of starting a driver."""

import json
import os
import subprocess
import sys

import pytest

from services.workers import WORKERS
from shared import spark
from shared.config import load
from shared.levers.driver_command import driver_command

STAND_IN = """#!/bin/sh
case "$*" in
  *org.apache.spark.launcher.Main*) exec "{java}" "$@" ;;
esac
exec "{python}" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$0" "$@" > "{record}"
"""


@pytest.mark.parametrize("name", sorted(WORKERS))
def test_the_driver_command_is_the_one_spark_submit_runs(name, tmp_path, monkeypatch):
    config = load({"KAFKA_URL": "kafka://127.0.0.1:9092", "DATABASE_URL": "postgres://u:p@127.0.0.1/db"})
    options = spark._options(name, config.spark, WORKERS[name].jvm)
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    record = tmp_path / "command.json"
    java.write_text(STAND_IN.format(java=os.path.join(os.environ["JAVA_HOME"], "bin", "java"),
                                    python=sys.executable, record=record))
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -Dwith.space='a b'")

    submit = [str(spark.spark_home() / "bin" / "spark-submit"),
              *(argument for option in options.items() for argument in ("--conf", "=".join(option))),
              "pyspark-shell"]
    subprocess.run(submit, check=True, timeout=120)
    ran = json.loads(record.read_text())
    ours = driver_command(options, spark.spark_home())

    main = ours.index("org.apache.spark.deploy.SparkSubmit")
    assert ran[:main + 1] == ours[:main + 1]  # the JVM, its class path and options, in their order
    assert sorted(pairs(ran[main + 1:-1])) == sorted(pairs(ours[main + 1:-1]))  # the options, in any order
    assert ran[-1] == ours[-1] == "pyspark-shell"


def pairs(arguments):
    assert arguments[::2] == ["--conf"] * (len(arguments) // 2)
    return arguments[1::2]
