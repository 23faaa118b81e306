"""The slug as `make test` built it (bin/build-slug): its size, its linked
Java runtime, and the class-data archive and compiler directives its Java
takes. These start the slug's JVM: integration, not unit, tests."""

import os
import subprocess
from pathlib import Path

import pytest

from devstack.local_stack import ROOT
from shared import spark
from shared.config import SparkConfig
from shared.levers.jit import Jit


def the_slug():
    """The slug `make test` built (bin/build-slug), whose pyspark SPARK_HOME names."""
    spark_home = Path(os.environ.get("SPARK_HOME") or "/nonexistent")
    slug = next((folder for folder in spark_home.parents if (folder / ".heroku").is_dir()), None)
    if slug is None:
        pytest.skip("SPARK_HOME is not the slug's pyspark: run through `make test`")
    return slug, spark_home


def test_the_slug_is_under_herokus_limit_and_tests_run_on_its_pruned_spark():
    """`make test` builds the slug first (bin/build-slug) and points SPARK_HOME
    at its pruned pyspark, so every Spark of the test run, end to end
    included, ran without the jars bin/prune-spark removed."""
    slug, spark_home = the_slug()
    jars = {jar.name for jar in (spark_home / "jars").glob("*.jar")}
    assert not [jar for jar in jars if jar.startswith(("rocksdbjni", "hive-", "spark-mllib",
                                                       "spark-connect", "kubernetes-", "jersey-server"))]
    assert not (spark_home / "pandas").exists() and (spark_home / "sql").is_dir()
    assert not (spark_home / "jars" / "connect-repl").exists(), "Spark Connect's REPL (58 MB)"
    assert any(jar.startswith("spark-sql_") for jar in jars)
    size = dict(pair.split("=") for pair in slug.with_suffix(".size").read_text().split())
    # Heroku warns above 300 MB (docs/decisions/slug.md: what the slug keeps)
    assert int(size["slug_compressed_mb"]) < 300
    assert (slug / "shared" / "worker" / "runner.py").is_file() and (slug / "services" / "workers.py").is_file()
    assert not [name for name in ("tests", "benchmarks", "devstack") if (slug / name).exists()]
    assert os.environ.get("JAVA_HOME") == str(slug / ".jdk"), "Spark runs on the slug's Java runtime"
    release = (slug / ".jdk" / "release").read_text()
    assert "java.base" in release and "jdk.compiler" not in release, "a runtime linked from the JDK"
    java = (ROOT / "system.properties").read_text().strip().removeprefix("java.runtime.version=")
    assert f'JAVA_VERSION="{java}.' in release, "the Java that system.properties names"
    assert (slug / ".jdk" / "bin" / "java").is_file() and not (slug / ".jdk" / "jmods").exists()


def test_link_java_runtime_goes_on_with_what_it_cannot_link(tmp_path):
    """The Docker image has no .jdk (its own Java runs the workers), and a
    runtime already linked has no jlink: bin/post_compile goes on with either."""
    link = str(ROOT / "bin" / "link-java-runtime")
    missing = subprocess.run([link, str(tmp_path / ".jdk")], capture_output=True, text=True)
    assert missing.returncode == 0 and "no " in missing.stdout and not (tmp_path / ".jdk").exists()
    linked = tmp_path / "linked"
    (linked / "bin").mkdir(parents=True)
    (linked / "release").write_text('JAVA_VERSION="17.0.15"\n')
    kept = subprocess.run([link, str(linked)], capture_output=True, text=True)
    assert kept.returncode == 0 and "kept as it is" in kept.stdout
    assert (linked / "release").is_file() and not (tmp_path / "linked.linked").exists()


def java_with_the_class_archive(class_path, *arguments):
    """The slug's Java run with the workers' class-data archive and this class
    path (-Xshare:on: a JVM that cannot map the archive fails instead of
    loading the classes one by one, as a worker's JVM silently would)."""
    command = [str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"), "-Xshare:on",
               f"-XX:SharedArchiveFile={spark.class_archive()}", "-XX:+UseSerialGC", "-cp", class_path, *arguments]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)


def java_maps_the_class_archive(class_path):
    return java_with_the_class_archive(class_path, "-version").returncode == 0


def test_the_slug_has_the_workers_class_archive_and_a_workers_jvm_maps_it():
    """bin/post_compile wrote the archive on the slug's Java and jars; a
    worker's JVM (shared.spark's options) maps it. The class path is named
    jar by jar because the archive holds only for its order: the launcher's
    `jars/*` would follow the order a dyno's file system lists them in."""
    slug, spark_home = the_slug()
    assert spark.class_archive() == spark_home / spark.CLASS_ARCHIVE and spark.class_archive().is_file()
    options = spark.spark_options("test", SparkConfig())
    assert f"-XX:SharedArchiveFile={spark.class_archive()}" in options["spark.driver.extraJavaOptions"]
    class_path = options["spark.driver.extraClassPath"].split(":")
    assert java_maps_the_class_archive(":".join(class_path))
    assert not java_maps_the_class_archive(":".join(reversed(class_path)))


def test_the_class_archive_holds_janinos_compiler_and_the_kafka_clients_tls_and_fetching():
    """Classes the archive's run (no broker) never reaches, and Janino's,
    whose jar bin/prune-spark unsigns (the classes of a signed jar stay out
    of an archive), come from it all the same: bin/spark-class-archive loads
    every class of those jars."""
    the_slug()
    class_path = spark.spark_options("test", SparkConfig())["spark.driver.extraClassPath"]

    def from_the_archive(name):
        # A class named as the main class is loaded, then the launcher finds no main method.
        loaded = java_with_the_class_archive(class_path, "-Xlog:class+load=info", name).stdout
        assert f"{name} source: " in loaded
        return f"{name} source: shared objects file" in loaded

    assert from_the_archive("org.codehaus.janino.UnitCompiler")
    assert from_the_archive("org.apache.kafka.common.security.ssl.DefaultSslEngineFactory")
    assert from_the_archive("org.apache.kafka.clients.consumer.internals.FetchCollector")
    assert not from_the_archive("org.apache.spark.deploy.master.ui.MasterPage"), "a class no worker loads"


def test_the_slugs_java_takes_the_compiler_directives_and_keeps_c2_off_what_they_name():
    """A directives file the JVM cannot find or parse stops it before it
    starts (then no aggregator would start): the slug's Java takes this
    one, and keeps C2 off the packages it names (Jit.TIERED_RECORDS)."""
    slug, _ = the_slug()
    java = [str(slug / ".jdk" / "bin" / "java"), *Jit.TIERED_RECORDS.value]
    started = subprocess.run([*java, "-XX:+CompilerDirectivesPrint", "-version"], capture_output=True, text=True,
                             timeout=60)
    assert started.returncode == 0, started.stdout + started.stderr
    directive = started.stdout.split("Directive: (default)")[0]
    assert "org/apache/spark/sql/catalyst/analysis/*.*" in directive
    assert "Exclude:true" in directive.split("c2 directives:")[1]
    assert "Exclude:true" not in directive.split("c2 directives:")[0], "C1 compiles what it names"
