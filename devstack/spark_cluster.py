"""A Spark standalone cluster on loopback, from the installed pyspark: a
master and its workers started with `spark-class`, as an operator's nodes
would run them, with RPC authentication and encryption on.

Each worker offers more cores than it has (Spark does not check), so two
drivers can each hold an executor on every worker of a 2-core machine.
"""

import json
import os
import secrets
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import psutil

from devstack.local_stack import free_port, terminate, wait_until

START_TIMEOUT = 90


def spark_home() -> Path:
    """SPARK_HOME, or the installed pyspark's own folder."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark
    return Path(pyspark.__file__).parent


class SparkCluster:
    def __init__(self, folder: Path, workers: int = 2, cores: int = 2, memory: str = "1400m"):
        self.folder = Path(folder)
        self.worker_count, self.cores, self.memory = workers, cores, memory
        self.secret = secrets.token_hex(32)
        self.port, self.ui_port = free_port(), free_port()
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def driver_environment(self, executors: int = 2, executor_memory: str = "600m") -> dict[str, str]:
        """What a driver on this cluster is given: one core per executor."""
        return {"SPARK_MASTER": self.url, "SPARK_AUTHENTICATE_SECRET": self.secret,
                "SPARK_EXECUTOR_CORES": "1", "SPARK_CORES_MAX": str(executors),
                "SPARK_EXECUTOR_MEMORY": executor_memory, "SPARK_LOCAL_IP": "127.0.0.1"}

    def start(self) -> "SparkCluster":
        self.folder.mkdir(parents=True, exist_ok=True)
        # The daemons' shared secret, in a file only this user reads (not on
        # a command line, which every user of the host can list).
        properties = self.folder / "spark-defaults.conf"
        properties.touch(mode=0o600)
        properties.write_text(f"spark.authenticate true\nspark.authenticate.secret {self.secret}\n"
                              "spark.network.crypto.enabled true\n")
        self._start_master()
        self.start_workers()
        return self

    def _start_master(self) -> None:
        self.master = self._daemon("master", "org.apache.spark.deploy.master.Master",
                                   "--host", "127.0.0.1", "--port", str(self.port),
                                   "--webui-port", str(self.ui_port))
        wait_until(lambda: self._state() is not None, START_TIMEOUT, f"the Spark master on {self.url}")

    def start_workers(self) -> None:
        self.workers = [self._daemon(
            f"worker-{number}", "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
            "--cores", str(self.cores), "--memory", self.memory,
            "--work-dir", str(self.folder / f"work-{number}"), self.url) for number in range(self.worker_count)]
        wait_until(lambda: len(self.alive_workers()) == self.worker_count, START_TIMEOUT,
                   f"{self.worker_count} Spark workers registered")

    def stop_master(self) -> None:
        """The master gone; started again, it knows of no application
        (standalone, without a recovery mode: an operator's restart)."""
        assert self.master is not None
        os.killpg(self.master.pid, signal.SIGTERM)
        terminate(self.master)

    def restart_master(self) -> None:
        self.stop_master()
        self._start_master()

    def kill_application(self, name: str) -> None:
        """Remove a running application, as the master's web UI lets an
        operator (and as the master does itself after executors failed in a
        row): the master tells its driver it is dead."""
        (app_id,) = [app["id"] for app in self.running_apps() if app["name"] == name]
        form = urllib.parse.urlencode({"id": app_id, "terminate": "true"}).encode()
        urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/app/kill/", data=form, timeout=10).close()

    def kill_workers(self) -> None:
        """SIGKILL to each worker's process group: its executors die with it."""
        for process in self.workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for executor in self.executors():
            executor.kill()

    def _daemon(self, name: str, main_class: str, *args: str) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "a")  # a restarted daemon adds to its log
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_CONF_DIR": str(self.folder),
               # Light daemons: they only schedule, and share 2 cores with the rest.
               "SPARK_DAEMON_MEMORY": "256m",
               "SPARK_DAEMON_JAVA_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"}
        with log:
            return subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), main_class, *args,
                 "--properties-file", str(self.folder / "spark-defaults.conf")],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _state(self) -> dict | None:
        """The master's own view (its web UI's JSON), None while it is not up
        (a web UI still starting may answer with an empty page)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as reply:
                return json.load(reply)
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> list[dict]:
        return [worker for worker in (self._state() or {}).get("workers", []) if worker["state"] == "ALIVE"]

    def running_apps(self) -> list[dict]:
        return (self._state() or {}).get("activeapps", [])

    def executors(self, app_name: str | None = None) -> list[psutil.Process]:
        """The executor JVMs the workers launched (for one app, by its name);
        each runs in the folder work-N/<app id>/<executor id>."""
        app_ids = {app["id"] for app in self.running_apps() if app["name"] == app_name} if app_name else set()
        found = [process for process in psutil.process_iter(["cmdline", "cwd", "ppid"])
                 if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in (process.info["cmdline"] or [])
                 and (process.info["cwd"] or "").startswith(str(self.folder))
                 and (app_name is None or Path(process.info["cwd"]).parent.name in app_ids)]
        # An executor forks short-lived children (`getconf PAGESIZE` for its
        # process metrics) that carry its command line until they exec.
        pids = {process.pid for process in found}
        return [process for process in found if process.info["ppid"] not in pids]

    def executors_running_a_task(self, app_name: str) -> list[psutil.Process]:
        """The executors of `app_name` that began a task they have not finished."""
        return [executor for executor in self.executors(app_name)
                if (log := _log(executor)).count("Executor: Running task") > log.count("Executor: Finished task")]

    def registered_executors(self, app_name: str) -> int:
        """How many executors of `app_name` told their driver they are there."""
        return sum("Successfully registered with driver" in _log(executor) for executor in self.executors(app_name))

    def logs(self) -> str:
        """Everything the daemons and their executors wrote."""
        return "\n".join(path.read_text(errors="replace") for path in sorted(self.folder.rglob("*"))
                         if path.is_file() and path.name != "spark-defaults.conf"
                         and path.suffix != ".jar")

    def stop(self) -> None:
        """SIGTERM to each daemon's process group (a worker's executors too)."""
        for process in [*self.workers, self.master]:
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                terminate(process)
        for executor in self.executors():  # orphans of a worker that died first
            executor.kill()


def _log(executor: psutil.Process) -> str:
    """What an executor wrote: its stderr, in the folder it runs in ("" in
    the moment after it started, before its worker created the file)."""
    stderr = Path(executor.info["cwd"]) / "stderr"
    return stderr.read_text(errors="replace") if stderr.exists() else ""
