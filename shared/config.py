"""The project's configuration, parsed once from the environment.

Every variable is described in ../shared/CONTRACT.md. From one parse this
module gives what each client needs:

* ``spark_kafka_options()``: options for Spark's Kafka source and sink;
* ``kafka_python_kwargs()``: keyword arguments for kafka-python;
* ``database_url``: a SQLAlchemy URL.

A missing or malformed variable raises ``ConfigError``, a ``SystemExit`` whose
one line names the variable and never its value, so an uncaught one stops the
process with that line and no traceback.
"""

import functools
import ipaddress
import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from dotenv import load_dotenv

from shared.logs import log

D = TypeVar("D", int, None)


class ConfigError(SystemExit):
    """A variable is missing or malformed. The message names it, never its value."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"config error: {variable} {problem}")
        self.variable = variable


@dataclass(frozen=True)
class KafkaConfig:
    brokers: tuple[str, ...]  # ("host:port", ...)
    use_tls: bool
    prefix: str = ""
    stem: str = "KAFKA"  # whose variables these are: KAFKA_* or an add-on's
    dyno: str = ""  # DYNO, as Heroku names the copy; "" elsewhere
    trusted_cert: str = field(default="", repr=False)
    client_cert: str = field(default="", repr=False)
    client_key_pkcs8: str = field(default="", repr=False)

    def topic(self, name: str) -> str:
        return self.prefix + name

    def group_id(self, app: str) -> str:
        """The consumer group of a service: ``<prefix><app>-app``."""
        return f"{self.prefix}{app}-app"

    @property
    def group_instance_id(self) -> str | None:
        """A copy's static identity in its group (KIP-345): ``<prefix><DYNO>``.
        Heroku restarts a crashed dyno under the same name, and the restarted
        copy takes its partitions back at once instead of waiting out the
        dead one's session. None without DYNO: a dynamic member."""
        return f"{self.prefix}{self.dyno}" if self.dyno else None

    def spark_kafka_options(self) -> dict[str, str]:
        """Options shared by Spark's Kafka source and sink (``kafka.*``).

        The Java client reads the PEMs from the JVM's environment (Kafka's
        EnvVarConfigProvider; see ``jvm_environment``): Spark keeps a copy of
        a source's options in its plan, unredacted, and prints it with
        `explain` and in any analysis error, so the options hold only names.
        """
        options = {"kafka.bootstrap.servers": ",".join(self.brokers)}
        if not self.use_tls:
            return options
        options.update({
            "kafka.security.protocol": "SSL",
            "kafka.config.providers": "env",
            "kafka.config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.certificates": "${env:%s}" % JVM_PEM_VARIABLES["trusted_cert"],
            # Heroku's broker certificates do not name the host: verify the
            # chain, not the host name.
            "kafka.ssl.endpoint.identification.algorithm": "",
        })
        if self.client_cert:
            options.update({
                "kafka.ssl.keystore.type": "PEM",
                "kafka.ssl.keystore.certificate.chain": "${env:%s}" % JVM_PEM_VARIABLES["client_cert"],
                "kafka.ssl.keystore.key": "${env:%s}" % JVM_PEM_VARIABLES["client_key_pkcs8"],
            })
        return options

    def jvm_environment(self) -> dict[str, str]:
        """The variables a JVM that uses ``spark_kafka_options()`` must start
        with: the PEMs, the key as PKCS#8 (what Java reads)."""
        if not self.use_tls:
            return {}
        return {variable: getattr(self, name) for name, variable in JVM_PEM_VARIABLES.items()
                if getattr(self, name)}

    def kafka_python_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python's producer, consumer and admin."""
        kwargs: dict[str, Any] = {"bootstrap_servers": list(self.brokers)}
        if self.use_tls:
            kwargs.update(security_protocol="SSL", ssl_context=ssl_context(self))
        return kwargs


JVM_PEM_VARIABLES = {"trusted_cert": "SPARK_KAFKA_TRUSTED_CERT", "client_cert": "SPARK_KAFKA_CLIENT_CERT",
                     "client_key_pkcs8": "SPARK_KAFKA_CLIENT_KEY"}


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[2]"  # SPARK_MASTER
    driver_memory: str = ""  # SPARK_DRIVER_MEMORY; "": half the dyno's memory
    shuffle_partitions: int = 2  # SPARK_SHUFFLE_PARTITIONS
    max_offsets_per_trigger: int | None = None  # MAX_OFFSETS_PER_TRIGGER; None: the worker's own
    # MAX_BYTES_PER_TRIGGER, of keys and values (shared/worker/batch_size.py): twice
    # what Spark's execution and storage memory holds at a 512m heap, as a
    # word is its record's key and value.
    max_bytes_per_trigger: int = 256 << 20
    start_from: str = "earliest"  # START_FROM: where a group with no stored offsets begins
    # On a cluster (any SPARK_MASTER but local[...]):
    executor_memory: str = ""  # SPARK_EXECUTOR_MEMORY; "": Spark's 1g
    executor_cores: int | None = None  # SPARK_EXECUTOR_CORES; None: Spark's (1 on YARN, all of a standalone worker's)
    cores_max: int | None = None  # SPARK_CORES_MAX; None: every free core of a standalone cluster
    authenticate_secret: str = field(default="", repr=False)  # SPARK_AUTHENTICATE_SECRET

    @property
    def on_cluster(self) -> bool:
        return not self.master.startswith("local")


@dataclass(frozen=True)
class ChannelsConfig:
    """Where alerts go besides the topic; each channel only when configured."""

    pagerduty_routing_key: str = field(default="", repr=False)
    pagerduty_events_url: str = "https://events.pagerduty.com/v2/enqueue"
    smtp_server: str = ""  # SMTP_* or the Mailgun add-on's MAILGUN_SMTP_*
    smtp_port: int = 587
    smtp_login: str = ""
    smtp_password: str = field(default="", repr=False)
    email_from: str = "alerts@localhost"
    email_to: tuple[str, ...] = ()


@dataclass(frozen=True)
class Config:
    kafka: KafkaConfig | None  # None when loaded with needs_kafka=False (the release phase)
    database_url: str = field(default="", repr=False)
    window_seconds: int = 10
    urgent_threshold: int = 100
    email_threshold: int = 50
    retention_hours: int = 168  # 0: kept forever
    spark: SparkConfig = SparkConfig()
    channels: ChannelsConfig = ChannelsConfig()


def load(environ: Mapping[str, str] | None = None, *, needs_kafka: bool = True, needs_database: bool = False,
         dotenv_path: Path | None = None) -> Config:
    """Parse the environment, plus a ``.env`` file off a dyno (the real
    environment winning): on Heroku the config vars are the whole
    configuration, and a stray `.env` in the slug must not add to them."""
    if environ is None:
        if not os.environ.get("DYNO"):
            load_dotenv(dotenv_path or Path.cwd() / ".env", override=False)
        environ = os.environ
    kafka = _kafka_config(environ) if needs_kafka else None
    urgent = _positive_int(environ, "ANOMALY_URGENT_THRESHOLD", 100)
    email = _positive_int(environ, "ANOMALY_EMAIL_THRESHOLD", 50)
    if email >= urgent:  # an urgent alert would never follow its email
        raise ConfigError("ANOMALY_EMAIL_THRESHOLD", "must be below ANOMALY_URGENT_THRESHOLD")
    return Config(
        kafka=kafka,
        database_url=_database_url(environ, required=needs_database),
        window_seconds=_positive_int(environ, "WINDOW_SECONDS", 10),
        urgent_threshold=urgent,
        email_threshold=email,
        retention_hours=_positive_int(environ, "RETENTION_HOURS", 168, zero_allowed=True),
        spark=_spark_config(environ),
        channels=_channels_config(environ),
    )


# Spark refuses to start a driver or an executor below 1.5 times the 300 MB
# it reserves, as the JVM counts a heap (a 480m heap is 463 MB to it).
MIN_SPARK_MEMORY_MB = 512
MEBIBYTES_PER_UNIT = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024**2}  # none: MiB, as Spark reads it


def _spark_config(environ: Mapping[str, str]) -> SparkConfig:
    start_from = environ.get("START_FROM", "").strip() or "earliest"
    if start_from not in ("earliest", "latest"):
        raise ConfigError("START_FROM", "must be earliest or latest")
    master = environ.get("SPARK_MASTER", "").strip() or "local[2]"
    secret = environ.get("SPARK_AUTHENTICATE_SECRET", "").strip()
    if master.startswith("spark://") and not secret:
        # The standalone master, its workers and every driver share it: with
        # it Spark authenticates and encrypts its RPC, which carries the
        # Kafka TLS key to the executors.
        raise ConfigError("SPARK_AUTHENTICATE_SECRET", "must be set for a spark:// master "
                          "(the spark.authenticate.secret of the cluster's master and workers)")
    return SparkConfig(
        master=master,
        driver_memory=_memory_size(environ, "SPARK_DRIVER_MEMORY"),
        shuffle_partitions=_positive_int(environ, "SPARK_SHUFFLE_PARTITIONS", 2),
        max_offsets_per_trigger=_positive_int(environ, "MAX_OFFSETS_PER_TRIGGER", None),
        max_bytes_per_trigger=_positive_int(environ, "MAX_BYTES_PER_TRIGGER", 256 << 20),
        start_from=start_from,
        executor_memory=_memory_size(environ, "SPARK_EXECUTOR_MEMORY"),
        executor_cores=_positive_int(environ, "SPARK_EXECUTOR_CORES", None),
        cores_max=_positive_int(environ, "SPARK_CORES_MAX", None),
        authenticate_secret=secret)


def _memory_size(environ: Mapping[str, str], variable: str) -> str:
    """A JVM size such as 512m or 2g, at least Spark's minimum; "" when unset."""
    value = environ.get(variable, "").strip()
    if value:
        size = re.fullmatch(r"([1-9][0-9]*)([kmgt]?)", value.lower())
        if not size:
            raise ConfigError(variable, "must be a size such as 512m or 2g")
        if int(size[1]) * MEBIBYTES_PER_UNIT[size[2]] < MIN_SPARK_MEMORY_MB:
            raise ConfigError(variable, f"must be at least {MIN_SPARK_MEMORY_MB}m")
    return value


def _channels_config(environ: Mapping[str, str]) -> ChannelsConfig:
    def smtp(name: str) -> str:
        return environ.get(f"SMTP_{name}", "").strip() or environ.get(f"MAILGUN_SMTP_{name}", "").strip()

    port_variable = "SMTP_PORT" if environ.get("SMTP_PORT", "").strip() else "MAILGUN_SMTP_PORT"
    port = _positive_int(environ, port_variable, 587)
    if port > 65535:
        raise ConfigError(port_variable, "must be a port number (1 to 65535)")
    events_url = environ.get("PAGERDUTY_EVENTS_URL", "").strip() or ChannelsConfig.pagerduty_events_url
    if urlsplit(events_url).scheme != "https" or not urlsplit(events_url).hostname:
        # The routing key travels with every event.
        raise ConfigError("PAGERDUTY_EVENTS_URL", "must be an https:// URL")
    email_from = environ.get("ALERT_EMAIL_FROM", "").strip() or ChannelsConfig.email_from
    email_to = tuple(address.strip() for address in environ.get("ALERT_EMAIL_TO", "").split(",") if address.strip())
    if not EMAIL_ADDRESS.fullmatch(email_from):
        raise ConfigError("ALERT_EMAIL_FROM", "must be one email address (name@host)")
    if not all(EMAIL_ADDRESS.fullmatch(address) for address in email_to):
        raise ConfigError("ALERT_EMAIL_TO", "must be email addresses (name@host), separated by commas")
    return ChannelsConfig(
        pagerduty_routing_key=environ.get("PAGERDUTY_ROUTING_KEY", "").strip(),
        pagerduty_events_url=events_url,
        smtp_server=smtp("SERVER"), smtp_port=port, smtp_login=smtp("LOGIN"), smtp_password=smtp("PASSWORD"),
        email_from=email_from, email_to=email_to)


# A bare address: no display name, no space, comma or line break (which
# would add a header or a recipient), one @ with something on each side.
EMAIL_ADDRESS = re.compile(r"[^@\s,<>\"]+@[^@\s,<>\"]+")


def _kafka_config(environ: Mapping[str, str]) -> KafkaConfig:
    stem = environ.get("KAFKA_ADDON", "").strip() or "KAFKA"
    names = {part: f"{stem}_{part}" for part in
             ("URL", "TRUSTED_CERT", "CLIENT_CERT", "CLIENT_CERT_KEY", "PREFIX")}
    brokers, use_tls = _parse_kafka_url(environ.get(names["URL"], ""), names["URL"])
    prefix = environ.get(names["PREFIX"], "").strip()
    dyno = environ.get("DYNO", "").strip()
    if not use_tls:
        for part in ("TRUSTED_CERT", "CLIENT_CERT", "CLIENT_CERT_KEY"):
            if environ.get(names[part], "").strip():
                log("config_ignored", variable=names[part], reason=f"{names['URL']} names kafka:// brokers")
        return KafkaConfig(brokers=brokers, use_tls=False, prefix=prefix, stem=stem, dyno=dyno)

    trusted = _pem_certificates(environ, names["TRUSTED_CERT"], required=True)
    cert = _pem_certificates(environ, names["CLIENT_CERT"], required=False)
    key = environ.get(names["CLIENT_CERT_KEY"], "").strip()
    if bool(cert) != bool(key):
        missing = names["CLIENT_CERT_KEY"] if cert else names["CLIENT_CERT"]
        raise ConfigError(missing, "is required when the other half of the client certificate is set")
    return KafkaConfig(brokers=brokers, use_tls=True, prefix=prefix, stem=stem, dyno=dyno,
                       trusted_cert=trusted, client_cert=cert,
                       client_key_pkcs8=_pkcs8(key, names["CLIENT_CERT_KEY"]) if key else "")


def _parse_kafka_url(value: str, variable: str) -> tuple[tuple[str, ...], bool]:
    if not value.strip():
        raise ConfigError(variable, "is not set")
    brokers, schemes = [], set()
    for url in value.split(","):
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme not in ("kafka", "kafka+ssl") or not parts.hostname or not port:
            raise ConfigError(variable, "must be a comma-separated list of kafka://host:port "
                                        "or kafka+ssl://host:port URLs")
        schemes.add(parts.scheme)
        brokers.append(f"{parts.hostname}:{port}")
    if len(schemes) > 1:
        raise ConfigError(variable, "mixes kafka:// and kafka+ssl:// URLs; use one scheme for every broker")
    return tuple(brokers), schemes == {"kafka+ssl"}


def _pem_certificates(environ: Mapping[str, str], variable: str, *, required: bool) -> str:
    pem = environ.get(variable, "").strip()
    if not pem:
        if required:
            raise ConfigError(variable, "is required for kafka+ssl:// brokers")
        return ""
    try:
        x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        raise ConfigError(variable, "is not a PEM certificate") from None
    return pem + "\n"


def _pkcs8(pem: str, variable: str) -> str:
    """The Java client reads only PKCS#8 keys; Heroku hands out PKCS#1 ones."""
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise ConfigError(variable, "is not an unencrypted PEM private key (PKCS#1 or PKCS#8)") from None
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


# libpq's modes that never talk in clear, and those that may.
TLS_MODES = ("require", "verify-ca", "verify-full")
CLEAR_MODES = ("disable", "allow", "prefer")


def _database_url(environ: Mapping[str, str], *, required: bool) -> str:
    """A SQLAlchemy URL for DATABASE_URL. A host that is not loopback is
    reached over TLS only: the URL's own sslmode if it is one of TLS_MODES,
    else verify-full where the URL names a CA (sslrootcert), else require
    (Heroku Postgres's certificates name no CA an app could verify)."""
    url = environ.get("DATABASE_URL", "").strip()
    if not url:
        if required:
            raise ConfigError("DATABASE_URL", "is not set")
        return ""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("postgres", "postgresql", "postgresql+psycopg2"):
        raise ConfigError("DATABASE_URL", "must be a postgres:// or postgresql:// URL")
    try:
        parts = urlsplit(url)
        query = parse_qs(parts.query, keep_blank_values=True)
    except ValueError:
        raise ConfigError("DATABASE_URL", "is not a URL") from None
    hosts = query.get("host", [parts.hostname or ""])[-1]
    mode = query.get("sslmode", [""])[-1]
    if all(_loopback(host) for host in hosts.split(",")):
        return "postgresql+psycopg2://" + rest
    if mode in CLEAR_MODES or (mode and mode not in TLS_MODES):
        raise ConfigError("DATABASE_URL", f"has sslmode={mode}: a host that is not loopback is reached over TLS "
                                          f"only ({', '.join(TLS_MODES)})")
    if mode:
        return "postgresql+psycopg2://" + rest
    mode = "verify-full" if query.get("sslrootcert") else "require"
    return "postgresql+psycopg2://" + rest + ("&" if parts.query else "?") + f"sslmode={mode}"


def _loopback(host: str) -> bool:
    """libpq's host: a Unix socket (none given, or a folder), or a name or
    address of this machine's loopback."""
    if not host or host.startswith("/") or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _positive_int(environ: Mapping[str, str], variable: str, default: D, zero_allowed: bool = False) -> int | D:
    value = environ.get(variable, "").strip()
    if not value:
        return default
    # ASCII digits only: int() also takes "+5", "1_000" and other scripts' digits.
    number = int(value) if value.isascii() and value.isdigit() else -1
    if number < 0 or (number == 0 and not zero_allowed):
        raise ConfigError(variable, "must be a whole number of 0 or more" if zero_allowed
                          else "must be a positive whole number")
    return number


@functools.cache
def ssl_context(kafka: KafkaConfig) -> ssl.SSLContext:
    """The TLS context of kafka-python's clients: the chain verified, not the
    host name (Heroku's broker certificates do not name it). Python loads a
    key from a file only: it is written readable by this user alone and
    removed as soon as it is loaded."""
    context = ssl.create_default_context(cadata=kafka.trusted_cert)
    context.check_hostname = False
    # The chain is verified as Java's client verifies it (Spark's reads the
    # same brokers), without the stricter RFC 5280 checks of Python 3.13's
    # default contexts, which a private CA such as Heroku's need not meet.
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    if kafka.client_cert:
        with tempfile.TemporaryDirectory(prefix="kafka-tls-") as folder:  # mode 0700
            paths = []
            for name, pem in (("cert.pem", kafka.client_cert), ("key.pem", kafka.client_key_pkcs8)):
                path = os.path.join(folder, name)
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w") as pem_file:
                    pem_file.write(pem)
                paths.append(path)
            context.load_cert_chain(*paths)
    return context
