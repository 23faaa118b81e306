"""The config module, rule by rule, from ../shared/CONTRACT.md's environment."""

import os
import re
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from sqlalchemy.engine import make_url

from devstack.certificates import CertificateAuthority
from devstack.local_stack import ROOT
from services.workers import WORKERS
from shared import config as config_module
from shared import jvm_options, levers
from shared.config import ConfigError, SparkConfig, load
from shared.jvm_options import driver_memory
from shared.levers.jit import Jit
from shared.spark import REDACTED, cluster_options, cluster_secrets, connector_jars, spark_options


@pytest.fixture(scope="module")
def ca():
    return CertificateAuthority()


@pytest.fixture(scope="module", params=["pkcs1", "pkcs8"])
def tls_env(request, ca):
    client = ca.issue("client", key_format=request.param)
    return {
        "KAFKA_URL": "kafka+ssl://b1.example:9096,kafka+ssl://b2.example:9096",
        "KAFKA_TRUSTED_CERT": ca.cert_pem,
        "KAFKA_CLIENT_CERT": client.cert_pem,
        "KAFKA_CLIENT_CERT_KEY": client.key_pem,
    }


def public_key_of(pem):
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    return key.public_key().public_numbers()


def assert_names_only(error, variable, *secrets):
    message = str(error.value)
    assert variable in message
    assert "\n" not in message
    for secret in secrets:
        assert secret not in message


# --- KAFKA_URL -------------------------------------------------------------

def test_plaintext_brokers_reach_every_client():
    config = load({"KAFKA_URL": "kafka://b1.example:9092, kafka://b2.example:9093"})
    assert config.kafka.spark_kafka_options() == {"kafka.bootstrap.servers": "b1.example:9092,b2.example:9093"}
    assert config.kafka.kafka_python_kwargs() == {"bootstrap_servers": ["b1.example:9092", "b2.example:9093"]}


@pytest.mark.parametrize("url", [
    "", "   ", "http://b1.example:9092", "b1.example:9092", "kafka://b1.example",
    "kafka://:9092", "kafka://b1.example:notaport", "kafka://b1.example:9092,",
    "kafka://b1.example:9092,kafka+ssl://b2.example:9096",
])
def test_bad_kafka_url_names_the_variable_and_not_the_value(url):
    with pytest.raises(ConfigError) as error:
        load({"KAFKA_URL": url})
    assert error.value.variable == "KAFKA_URL"
    assert_names_only(error, "KAFKA_URL", "b1.example", "b2.example")


# --- TLS -------------------------------------------------------------------

def test_tls_for_spark_names_variables_that_hold_the_pems_with_a_pkcs8_key(tls_env):
    kafka = load(tls_env).kafka
    options = kafka.spark_kafka_options()
    assert options["kafka.bootstrap.servers"] == "b1.example:9096,b2.example:9096"
    assert options["kafka.security.protocol"] == "SSL"
    assert options["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert options["kafka.config.providers.env.class"].endswith(".EnvVarConfigProvider")
    assert options["kafka.ssl.truststore.type"] == options["kafka.ssl.keystore.type"] == "PEM"
    assert not any("BEGIN" in value for value in options.values())
    environment = kafka.jvm_environment()
    for option, variable in [("truststore.certificates", "KAFKA_TRUSTED_CERT"),
                             ("keystore.certificate.chain", "KAFKA_CLIENT_CERT")]:
        named = options[f"kafka.ssl.{option}"]
        assert environment[named[len("${env:"):-1]].strip() == tls_env[variable].strip()
    key = environment[options["kafka.ssl.keystore.key"][len("${env:"):-1]]
    assert key.startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8, what Java reads
    assert public_key_of(key) == public_key_of(tls_env["KAFKA_CLIENT_CERT_KEY"])


def test_tls_for_kafka_python_is_a_verifying_context_whose_key_file_is_gone_once_loaded(
        tls_env, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # other test processes use the real one
    written, real_open = [], os.open
    monkeypatch.setattr(os, "open", lambda path, *args, **kw: written.append(path) or real_open(path, *args, **kw))
    config_module.ssl_context.cache_clear()
    kwargs = load(tls_env).kafka.kafka_python_kwargs()
    assert kwargs["security_protocol"] == "SSL"
    context = kwargs["ssl_context"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname is False
    assert len(context.get_ca_certs()) == 1
    pem_files = [Path(path) for path in written if str(path).endswith(".pem")]
    assert [path.name for path in pem_files] == ["cert.pem", "key.pem"]
    assert all(path.is_relative_to(tmp_path) for path in pem_files)
    assert os.listdir(tmp_path) == []


def test_tls_needs_the_trusted_cert(tls_env):
    env = {**tls_env, "KAFKA_TRUSTED_CERT": ""}
    with pytest.raises(ConfigError) as error:
        load(env)
    assert_names_only(error, "KAFKA_TRUSTED_CERT")


@pytest.mark.parametrize("variable", ["KAFKA_TRUSTED_CERT", "KAFKA_CLIENT_CERT"])
def test_a_malformed_certificate_is_named(tls_env, variable):
    garbage = "-----BEGIN CERTIFICATE-----\nc2VjcmV0LWJ5dGVz\n-----END CERTIFICATE-----"
    with pytest.raises(ConfigError) as error:
        load({**tls_env, variable: garbage})
    assert_names_only(error, variable, "c2VjcmV0LWJ5dGVz")


def test_a_malformed_key_is_named_and_not_printed(tls_env):
    broken = tls_env["KAFKA_CLIENT_CERT_KEY"].replace("A", "B", 40)
    with pytest.raises(ConfigError) as error:
        load({**tls_env, "KAFKA_CLIENT_CERT_KEY": broken})
    body = broken.splitlines()[1]
    assert_names_only(error, "KAFKA_CLIENT_CERT_KEY", body)
    assert error.value.__context__ is None or error.value.__suppress_context__


def test_a_client_certificate_needs_its_key(tls_env):
    with pytest.raises(ConfigError) as error:
        load({**tls_env, "KAFKA_CLIENT_CERT_KEY": ""})
    assert_names_only(error, "KAFKA_CLIENT_CERT_KEY")


def test_no_secret_in_reprs(tls_env):
    config = load({**tls_env, "DATABASE_URL": "postgres://u:hunter2@db.example:5432/d"})
    key_body = tls_env["KAFKA_CLIENT_CERT_KEY"].splitlines()[1]
    for text in (repr(config), str(config), repr(config.kafka)):
        assert key_body not in text
        assert "hunter2" not in text
        assert "BEGIN" not in text


# --- prefix and add-on alias -------------------------------------------------

def test_prefix_goes_on_topics_and_group_ids():
    kafka = load({"KAFKA_URL": "kafka://b1.example:9092", "KAFKA_PREFIX": "wabash-58799."}).kafka
    assert kafka.topic("words") == "wabash-58799.words"
    assert kafka.group_id("aggregator") == "wabash-58799.aggregator-app"


def test_no_prefix_by_default():
    kafka = load({"KAFKA_URL": "kafka://b1.example:9092"}).kafka
    assert kafka.topic("words") == "words"
    assert kafka.group_id("text-processor") == "text-processor-app"


def test_a_dyno_is_a_static_member_named_by_the_prefix_and_dyno_and_elsewhere_a_dynamic_one():
    on_heroku = {"KAFKA_URL": "kafka://b1.example:9092", "KAFKA_PREFIX": "wabash-58799.",
                 "DYNO": "aggregator_worker.2"}
    assert load(on_heroku).kafka.group_instance_id == "wabash-58799.aggregator_worker.2"
    assert load({"KAFKA_URL": "kafka://b1.example:9092"}).kafka.group_instance_id is None


def test_kafka_addon_reads_that_addons_variables(tls_env):
    env = {f"HEROKU_KAFKA_GRAY_{name[len('KAFKA_'):]}": value for name, value in tls_env.items()}
    env.update(KAFKA_ADDON="HEROKU_KAFKA_GRAY", HEROKU_KAFKA_GRAY_PREFIX="gray.",
               KAFKA_URL="kafka://ignored.example:1")
    kafka = load(env).kafka
    assert kafka.brokers == ("b1.example:9096", "b2.example:9096")
    assert kafka.use_tls and kafka.prefix == "gray."


def test_kafka_addon_errors_name_the_addons_variable():
    with pytest.raises(ConfigError) as error:
        load({"KAFKA_ADDON": "HEROKU_KAFKA_GRAY", "KAFKA_URL": "kafka://b1.example:9092"})
    assert_names_only(error, "HEROKU_KAFKA_GRAY_URL")


# --- DATABASE_URL ------------------------------------------------------------

@pytest.mark.parametrize("given", ["postgres://u:pw@db.example:5432/d", "postgresql://u:pw@db.example:5432/d"])
def test_heroku_database_url_becomes_a_sqlalchemy_url(given):
    config = load({"KAFKA_URL": "kafka://b1.example:9092", "DATABASE_URL": given}, needs_database=True)
    url = make_url(config.database_url)
    assert (url.drivername, url.username, url.password, url.host, url.port, url.database) == \
        ("postgresql+psycopg2", "u", "pw", "db.example", 5432, "d")


@pytest.mark.parametrize("given, mode", [
    ("postgres://u:pw@db.example:5432/d", "require"),
    ("postgres://u:pw@db.example:5432/d?sslrootcert=/etc/ca.pem", "verify-full"),  # a CA named: verified
    ("postgres://u:pw@db.example:5432/d?sslmode=verify-ca", "verify-ca"),
    ("postgres://u:pw@db.example:5432/d?sslmode=require&sslrootcert=/etc/ca.pem", "require"),
    ("postgres://u:pw@127.0.0.1:5432/d?hostaddr=127.0.0.1&host=db.example", "require"),  # libpq's host wins
])
def test_a_host_that_is_not_loopback_is_reached_over_tls_only(given, mode):
    url = make_url(load({"KAFKA_URL": "kafka://b1.example:9092", "DATABASE_URL": given}).database_url)
    assert url.query["sslmode"] == mode


@pytest.mark.parametrize("given", [
    "postgres://u:pw@localhost/d", "postgres://u:pw@127.0.0.1:5432/d", "postgres://u:pw@127.8.0.1/d",
    "postgres://u:pw@[::1]:5432/d", "postgres:///d?host=/var/run/postgresql", "postgres://u:pw@localhost/d?sslmode=disable",
])
def test_loopback_and_unix_sockets_are_as_the_url_says(given):
    url = make_url(load({"KAFKA_URL": "kafka://b1.example:9092", "DATABASE_URL": given}).database_url)
    assert url.query.get("sslmode") == ("disable" if "disable" in given else None)


@pytest.mark.parametrize("mode", ["disable", "allow", "prefer", "nonsense"])
def test_a_url_that_would_talk_in_clear_to_a_host_off_loopback_is_refused(mode):
    with pytest.raises(ConfigError) as error:
        load({"KAFKA_URL": "kafka://b1.example:9092", "DATABASE_URL": f"postgres://u:hunter2@db.example/d?sslmode={mode}"})
    assert_names_only(error, "DATABASE_URL", "hunter2")


def test_database_url_is_required_only_where_needed():
    assert load({"KAFKA_URL": "kafka://b1.example:9092"}).database_url == ""
    with pytest.raises(ConfigError) as error:
        load({"KAFKA_URL": "kafka://b1.example:9092"}, needs_database=True)
    assert_names_only(error, "DATABASE_URL")


def test_a_non_postgres_database_url_is_named_and_not_printed():
    with pytest.raises(ConfigError) as error:
        load({"KAFKA_URL": "kafka://b1.example:9092", "DATABASE_URL": "mysql://u:hunter2@db/d"})
    assert_names_only(error, "DATABASE_URL", "hunter2")


# --- numbers and .env ----------------------------------------------------------

def test_defaults_and_overrides_of_window_and_thresholds():
    base = {"KAFKA_URL": "kafka://b1.example:9092"}
    config = load(base)
    assert (config.window_seconds, config.urgent_threshold, config.email_threshold) == (10, 100, 50)
    config = load({**base, "WINDOW_SECONDS": "60", "ANOMALY_URGENT_THRESHOLD": "7",
                   "ANOMALY_EMAIL_THRESHOLD": "3"})
    assert (config.window_seconds, config.urgent_threshold, config.email_threshold) == (60, 7, 3)


@pytest.mark.parametrize("variable", ["WINDOW_SECONDS", "ANOMALY_URGENT_THRESHOLD", "ANOMALY_EMAIL_THRESHOLD",
                                      "MAX_OFFSETS_PER_TRIGGER", "MAX_BYTES_PER_TRIGGER", "SPARK_SHUFFLE_PARTITIONS",
                                      "SMTP_PORT"])
@pytest.mark.parametrize("value", ["ten", "0", "-5", "1.5", "+5", "1_000", "\u0661\u0662"])
def test_malformed_numbers_are_named(variable, value):
    with pytest.raises(ConfigError) as error:
        load({"KAFKA_URL": "kafka://b1.example:9092", variable: value})
    assert_names_only(error, variable)


def test_an_email_threshold_at_or_above_the_urgent_one_is_refused():
    base = {"KAFKA_URL": "kafka://b1.example:9092"}
    for email, urgent in (("100", None), ("7", "7"), ("8", "7")):
        with pytest.raises(ConfigError) as error:
            load({**base, "ANOMALY_EMAIL_THRESHOLD": email, **({"ANOMALY_URGENT_THRESHOLD": urgent} if urgent else {})})
        assert_names_only(error, "ANOMALY_EMAIL_THRESHOLD")
    assert load({**base, "ANOMALY_EMAIL_THRESHOLD": "99"}).email_threshold == 99


def test_tls_variables_beside_plaintext_brokers_are_named_as_ignored(tls_env, capsys):
    config = load({**tls_env, "KAFKA_URL": "kafka://b1.example:9092"})
    assert not config.kafka.use_tls
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[2] for line in lines] == [
        "variable=KAFKA_TRUSTED_CERT", "variable=KAFKA_CLIENT_CERT", "variable=KAFKA_CLIENT_CERT_KEY"]
    assert all(line.startswith("event=config_ignored ") and "BEGIN" not in line for line in lines)
    load({"KAFKA_URL": "kafka://b1.example:9092"})
    assert capsys.readouterr().out == ""


def test_spark_and_channel_settings_are_parsed_with_the_rest():
    base = {"KAFKA_URL": "kafka://b1.example:9092"}
    spark, channels = load(base).spark, load(base).channels
    assert (spark.master, spark.driver_memory, spark.max_offsets_per_trigger, spark.max_bytes_per_trigger,
            spark.start_from) == ("local[2]", "", None, 256 << 20, "earliest")
    assert (channels.pagerduty_routing_key, channels.smtp_server, channels.smtp_port) == ("", "", 587)
    config = load({**base, "MAX_OFFSETS_PER_TRIGGER": "700", "MAX_BYTES_PER_TRIGGER": "5000000",
                   "START_FROM": "latest", "SPARK_DRIVER_MEMORY": "2g",
                   "MAILGUN_SMTP_SERVER": "smtp.mailgun.org", "MAILGUN_SMTP_PORT": "465",
                   "SMTP_LOGIN": "me", "ALERT_EMAIL_TO": "a@example.com, b@example.com"})
    assert (config.spark.max_offsets_per_trigger, config.spark.max_bytes_per_trigger, config.spark.start_from,
            config.spark.driver_memory) == (700, 5_000_000, "latest", "2g")
    assert (config.channels.smtp_server, config.channels.smtp_port, config.channels.smtp_login,
            config.channels.email_to) == ("smtp.mailgun.org", 465, "me", ("a@example.com", "b@example.com"))


def test_a_cluster_driver_is_sized_and_its_secret_kept_out_of_the_command_line(tls_env):
    cluster = {"SPARK_MASTER": "spark://10.0.1.5:7077", "SPARK_AUTHENTICATE_SECRET": "s3cr3t-value",
               "SPARK_EXECUTOR_MEMORY": "4g", "SPARK_EXECUTOR_CORES": "2", "SPARK_CORES_MAX": "16"}
    config = load({**tls_env, **cluster})
    assert config.spark.on_cluster and not load(tls_env).spark.on_cluster
    assert "s3cr3t-value" not in repr(config)
    options = cluster_options(config.spark)
    assert (options["spark.executor.memory"], options["spark.executor.cores"], options["spark.cores.max"],
            options["spark.authenticate"], options["spark.network.crypto.enabled"]) == \
        ("4g", "2", "16", "true", "true")
    # The executors fetch the connector from the driver; a driver alone has it on its class path.
    assert options["spark.jars"] == ",".join(connector_jars())
    assert "spark.jars" not in spark_options("aggregator", load(tls_env).spark)
    secrets = cluster_secrets(config.spark, config.kafka)
    assert secrets["spark.authenticate.secret"] == "s3cr3t-value"
    assert secrets["spark.executorEnv.SPARK_KAFKA_CLIENT_KEY"] == config.kafka.client_key_pkcs8
    assert all(re.search(REDACTED, name) for name in secrets)  # Spark prints none of them
    assert not any("s3cr3t" in value or "PRIVATE KEY" in value for value in options.values())


def test_a_standalone_cluster_without_the_shared_secret_is_refused():
    with pytest.raises(ConfigError) as error:
        load({"KAFKA_URL": "kafka://b1.example:9092", "SPARK_MASTER": "spark://10.0.1.5:7077"})
    assert_names_only(error, "SPARK_AUTHENTICATE_SECRET")


@pytest.mark.parametrize("variable, value", [
    ("START_FROM", "beginning"), ("SPARK_DRIVER_MEMORY", "lots"), ("SPARK_DRIVER_MEMORY", "480m"),
    ("SPARK_DRIVER_MEMORY", "500000k"), ("SPARK_EXECUTOR_MEMORY", "256m"), ("SPARK_EXECUTOR_CORES", "two"),
    ("SPARK_CORES_MAX", "0"), ("SMTP_PORT", "70000"), ("MAILGUN_SMTP_PORT", "smtp"),
    ("PAGERDUTY_EVENTS_URL", "http://events.pagerduty.com/v2/enqueue"), ("PAGERDUTY_EVENTS_URL", "https:///v2"),
    ("PAGERDUTY_EVENTS_URL", "events.pagerduty.com"), ("ALERT_EMAIL_FROM", "Alerts <alerts@example.com>"),
    ("ALERT_EMAIL_FROM", "alerts"), ("ALERT_EMAIL_TO", "ops@example.com\r\nBcc: x@example.com"),
    ("ALERT_EMAIL_TO", "ops@example.com, nobody"), ("ALERT_EMAIL_TO", "a@b@example.com"),
])
def test_malformed_spark_and_channel_settings_are_named(variable, value):
    with pytest.raises(ConfigError) as error:
        load({"KAFKA_URL": "kafka://b1.example:9092", variable: value})
    assert_names_only(error, variable)


def test_a_worker_with_a_bad_setting_stops_with_one_line_before_its_jvm_starts():
    done = subprocess.run([sys.executable, "-m", "services.text_processor"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={"PATH": os.environ["PATH"],
                                                      "KAFKA_URL": "kafka://127.0.0.1:9", "START_FROM": "now"})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == ["config error: START_FROM must be earliest or latest"]
    assert done.stdout == ""  # no Spark, no group: nothing was started


def test_dotenv_fills_gaps_and_the_real_environment_wins(tmp_path, monkeypatch):
    dotenv = tmp_path / ".env"
    dotenv.write_text("KAFKA_URL=kafka://from-dotenv.example:9092\nWINDOW_SECONDS=30\n")
    monkeypatch.delenv("KAFKA_URL", raising=False)
    monkeypatch.delenv("KAFKA_ADDON", raising=False)
    monkeypatch.delenv("DYNO", raising=False)  # off a dyno
    monkeypatch.setenv("WINDOW_SECONDS", "20")
    config = load(dotenv_path=dotenv)
    assert config.kafka.brokers == ("from-dotenv.example:9092",)
    assert config.window_seconds == 20


def test_on_a_dyno_a_dotenv_file_is_not_read(tmp_path, monkeypatch):
    (tmp_path / ".env").write_text("KAFKA_URL=kafka://from-dotenv.example:9092\n")
    monkeypatch.delenv("KAFKA_URL", raising=False)
    monkeypatch.delenv("KAFKA_ADDON", raising=False)
    monkeypatch.setenv("DYNO", "aggregator_worker.1")
    with pytest.raises(ConfigError) as error:
        load(dotenv_path=tmp_path / ".env")
    assert_names_only(error, "KAFKA_URL")


def test_a_config_error_stops_the_process_with_one_line():
    done = subprocess.run([sys.executable, "-c", "from shared.config import load; load()"],
                          cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "KAFKA_URL": "kafka://secret-host.example"})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == ["config error: KAFKA_URL must be a comma-separated "
                                                "list of kafka://host:port or kafka+ssl://host:port URLs"]
    assert "secret-host" not in done.stderr + done.stdout


@pytest.mark.parametrize("limit, heap", [
    ("536870912\n", "512m"),       # standard-1x: 512 MB, below what Spark needs
    ("1073741824\n", "512m"),      # standard-2x: 1 GB
    ("2684354560\n", "1280m"),     # performance-m: 2.5 GB
    ("9223372036854771712\n", "512m"),  # cgroup v1 without a limit
    ("max\n", "512m"),             # cgroup v2 without a limit
])
def test_the_heap_is_half_the_dynos_memory(tmp_path, limit, heap):
    limit_file = tmp_path / "memory.limit_in_bytes"
    limit_file.write_text(limit)
    assert driver_memory("", [str(tmp_path / "absent"), str(limit_file)]) == heap
    assert driver_memory("3g", [str(limit_file)]) == "3g"


def test_each_worker_compiles_its_code_as_it_declares_and_with_the_lever_off_as_hotspot_does(monkeypatch):
    """A worker's `jvm.jit` (docs/decisions/jit.md) reaches its driver's
    options, with no other worker's; with `LEVERS_OFF=jit`, none does."""
    jit_options = {option for jit in Jit for option in jit.value}
    assert len({worker.jvm.jit for worker in WORKERS.values()}) > 1, "the workers choose differently"
    for worker in WORKERS.values():
        options = spark_options(worker.name, SparkConfig(), worker.jvm)
        java_options = set(options["spark.driver.extraJavaOptions"].split())
        assert java_options & jit_options == set(worker.jvm.jit.value), worker.name
    monkeypatch.setattr(jvm_options, "LEVERS", levers.from_environment({"LEVERS_OFF": "jit"}))
    for worker in WORKERS.values():
        options = spark_options(worker.name, SparkConfig(), worker.jvm)
        assert not set(options["spark.driver.extraJavaOptions"].split()) & jit_options, worker.name


# Run as `python -m` runs a service, up to the step before Spark's JVM is
# launched (on the main thread: what it has imported by then is settled).
UNTIL_THE_JVM = """
import os, sys
from shared.worker import launch
def launching(*args):
    print(*sys.modules)
    os._exit(0)
launch.set_jvm_environment = launching
launch.main(sys.argv[1])
"""


def test_a_service_launches_its_jvm_before_importing_the_lifecycle():
    """What a worker's process has imported when Spark's JVM is launched:
    PySpark and its declaration, not the lifecycle's modules, which are
    imported while the JVM starts (shared.worker.launch)."""
    lifecycle = {"shared.worker.runner", "shared.worker.group_member", "shared.worker.query_run",
                 "shared.worker.exactly_once", "shared.worker.progress"}
    environment = {**os.environ, "KAFKA_URL": "kafka://127.0.0.1:1", "DATABASE_URL": "postgres://u:p@127.0.0.1/db"}
    for worker in WORKERS.values():
        imported = subprocess.run([sys.executable, "-c", UNTIL_THE_JVM, f"{worker.module}.worker"], env=environment,
                                  capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
        assert {"pyspark", f"{worker.module}.worker"} <= set(imported), worker.name
        assert not lifecycle & set(imported), worker.name
