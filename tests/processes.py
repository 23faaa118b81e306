"""Worker processes for end-to-end tests, and waiting with a deadline."""

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from shared.config import load
from shared.local_stack import wait_until  # noqa: F401 - the tests' deadline-bound wait

ROOT = Path(__file__).resolve().parent.parent


class Worker:
    def __init__(self, module, env, log_path):
        self.log_path = log_path
        self._log = open(log_path, "w")
        # Its own process group, so a signal reaches the JVM too, as on Heroku.
        self.process = subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, env=env,
                                        stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def output(self):
        return Path(self.log_path).read_text(errors="replace")

    def log_lines(self, event):
        """The worker's key=value lines of one event, as dicts."""
        return [dict(pair.split("=", 1) for pair in shlex.split(line))
                for line in self.output().splitlines()
                if line.startswith(f"event={event} ")]

    def signal(self, signum):
        os.killpg(self.process.pid, signum)

    def wait(self, timeout):
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()


class WorkerProcesses:
    def __init__(self, env, folder):
        self.env = {**os.environ, **env}
        self.folder = Path(folder)
        self.started = []

    def start(self, module, **extra_env):
        name = f"{module.rsplit('.', 1)[-1]}-{len(self.started)}.log"
        worker = Worker(module, {**self.env, **extra_env}, self.folder / name)
        self.started.append(worker)
        return worker

    def kill_all(self):
        for worker in self.started:
            if worker.process.poll() is None:
                worker.signal(signal.SIGKILL)
                worker.wait(30)


MODES = ("plaintext", "heroku")  # for tests that must pass against both brokers


def assert_no_secret_in(output, environment):
    """No line of the Kafka key (as given, or as the PKCS#8 Java reads) or
    of the certificates appears in `output`."""
    pems = {variable: environment.get(variable, "")
            for variable in ("KAFKA_CLIENT_CERT_KEY", "KAFKA_CLIENT_CERT", "KAFKA_TRUSTED_CERT")}
    if pems["KAFKA_CLIENT_CERT_KEY"]:
        pems["the key as PKCS#8"] = load(environment).kafka.client_key_pkcs8
    for name, pem in pems.items():
        for line in pem.splitlines()[1:-1]:
            assert line not in output, f"a line of {name} was printed"
