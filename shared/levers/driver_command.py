"""Spark's driver JVM, started with the command Spark's launcher would write.

`spark-submit` (which PySpark runs to start its JVM) is three shell scripts
and a JVM of its own, `org.apache.spark.launcher.Main`, whose only work is
to print the driver's command line, before the driver's JVM even begins,
on the path to every worker's first batch (docs/decisions/start-up.md). A
local driver's command is simple enough to write here;
tests/integration/test_driver_command.py checks it against the launcher's
own, for each worker.

What this supports of spark-submit's inputs: the `--conf` options given,
JAVA_HOME and SPARK_SUBMIT_OPTS (JVM options that benchmarks and the tests
add). Not SPARK_CONF_DIR's `spark-defaults.conf` or `spark-env.sh`, which a
slug does not have. Under `spark-submit` itself (PYSPARK_GATEWAY_PORT set:
its JVM runs the worker's Python) PySpark connects to that JVM as before.
"""

import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from py4j.clientserver import ClientServer, JavaParameters, PythonParameters
from py4j.java_gateway import JavaGateway, java_import
from pyspark.errors import PySparkRuntimeError
from pyspark.java_gateway import launch_gateway
from pyspark.serializers import UTF8Deserializer, read_int

# What Spark 4.2's launcher adds to every driver's JVM options after the
# driver's own (JavaModuleOptions, then the launcher's Derby default).
LAUNCHER_JAVA_OPTIONS = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    "--add-modules=jdk.incubator.vector",
    *(f"--add-opens={package}=ALL-UNNAMED" for package in (
        "java.base/java.lang", "java.base/java.lang.invoke", "java.base/java.lang.reflect", "java.base/java.io",
        "java.base/java.net", "java.base/java.nio", "java.base/java.util", "java.base/java.util.concurrent",
        "java.base/java.util.concurrent.atomic", "java.base/jdk.internal.ref", "java.base/sun.nio.ch",
        "java.base/sun.nio.cs", "java.base/sun.security.action", "java.base/sun.util.calendar",
        "java.security.jgss/sun.security.krb5")),
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.type=pooled",
    "-Dio.netty.handler.ssl.defaultEndpointVerificationAlgorithm=NONE",
    "--sun-misc-unsafe-memory-access=allow",
    "--enable-native-access=ALL-UNNAMED",
    "-Dderby.connection.requireAuthentication=false",
)
# The JVM classes PySpark's own launch imports into the gateway's view.
PYSPARK_IMPORTS = (
    "org.apache.spark.SparkConf", "org.apache.spark.api.java.*", "org.apache.spark.api.python.*",
    "org.apache.spark.ml.python.*", "org.apache.spark.mllib.api.python.*", "org.apache.spark.resource.*",
    "org.apache.spark.sql.Encoders", "org.apache.spark.sql.OnSuccessCall", "org.apache.spark.sql.functions",
    "org.apache.spark.sql.classic.*", "org.apache.spark.sql.api.python.*", "org.apache.spark.sql.hive.*",
    "scala.Tuple2",
)
# The JVM's command runs behind a shell that ignores SIGTERM and SIGINT,
# then execs it: a signal ignored across exec stays ignored, and HotSpot
# installs no handler of its own for one ignored at its start. (A
# preexec_fn would do it in the forked child, which Python documents as
# unsafe in a process with threads, as every worker is by then.)
IGNORING_STOPS = ("/bin/sh", "-c", 'trap "" TERM INT && exec "$@"', "java")
# How often the launch looks for the file in which the JVM says where its
# gateway listens (PySpark looks every 100 ms).
GATEWAY_POLL_S = 0.01


def driver_command(options: dict[str, str], spark_home: Path) -> list[str]:
    """The command line of a client-mode driver (`spark-submit --conf k=v
    ... pyspark-shell`) with `options`, which must name spark.driver.memory."""
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    # The launcher's conf folder is on it, though a slug has none.
    class_path = [options.get("spark.driver.extraClassPath", ""), str(spark_home / "conf"),
                  str(spark_home / "jars" / "*")]
    return [
        str(java), "-cp", ":".join(part for part in class_path if part),
        *shlex.split(os.environ.get("SPARK_SUBMIT_OPTS", "")),
        f"-Xmx{options['spark.driver.memory']}",
        *shlex.split(options.get("spark.driver.extraJavaOptions", "")),
        *LAUNCHER_JAVA_OPTIONS,
        "org.apache.spark.deploy.SparkSubmit",
        *(argument for name, value in options.items() for argument in ("--conf", f"{name}={value}")),
        "pyspark-shell",
    ]


def start_gateway(options: dict[str, str], spark_home: Path) -> JavaGateway:
    """Start the driver's JVM and connect to its Py4J gateway, as PySpark's
    launch_gateway does: one JVM thread pinned to each Python thread that
    calls it, and the JVM ends when this process's end closes its stdin.
    The JVM ignores SIGTERM and SIGINT: Heroku sends SIGTERM to every process
    of a dyno, and Ctrl-C reaches every process of a terminal's group, but
    Spark must not stop under a running batch; the worker stops it in order."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # under spark-submit: its JVM is there
        return launch_gateway()  # its options came with spark-submit's command
    with tempfile.TemporaryDirectory() as folder:
        info = Path(folder, "gateway")  # where the JVM writes its port and secret, then renames
        environment = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_CONNECT_MODE": "0",
                       "_PYSPARK_DRIVER_CONN_INFO_PATH": str(info)}
        process = subprocess.Popen([*IGNORING_STOPS, *driver_command(options, spark_home)],
                                   stdin=subprocess.PIPE, env=environment)
        while process.poll() is None and not info.is_file():
            time.sleep(GATEWAY_POLL_S)
        if not info.is_file():
            raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
        with info.open("rb") as stream:
            port, secret = read_int(stream), UTF8Deserializer().loads(stream)
    gateway = ClientServer(java_parameters=JavaParameters(port=port, auth_token=secret, auto_convert=True),
                           python_parameters=PythonParameters(port=0, eager_load=False))
    gateway.proc = process  # as PySpark's: the worker stops its JVM through it
    for name in PYSPARK_IMPORTS:
        java_import(gateway.jvm, name)
    return gateway

