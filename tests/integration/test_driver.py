"""A driver whose SparkContext Spark stopped under it (as when a cluster's
master removes the application) starts a new session in the same JVM, and
the query thread such a stop kills is one log line, not a stack trace;
any other JVM thread's death still prints Java's stack trace. Real Spark,
in a process of its own: a process holds one SparkContext at a time."""

import subprocess
import sys

from devstack.local_stack import ROOT

SCRIPT = '''
import threading

from shared.spark import session
from shared.worker.driver import Driver

driver = Driver(lambda: session("driver-test"), on_cluster=True, stop_requested=threading.Event())
gateway = driver.session.sparkContext._gateway

class Fails:
    def run(self):
        raise ValueError("a bug")
    class Java:
        implements = ["java.lang.Runnable"]

def thread_fails(name):
    thread = gateway.jvm.java.lang.Thread(Fails(), name)
    thread.start()
    thread.join()

thread_fails("while-running")
print("lost:", driver.lost(), flush=True)
driver.session.sparkContext._jsc.sc().stop()  # as Spark does when the master removes the application
thread_fails("after-the-stop")
print("lost:", driver.lost(), flush=True)
driver.renew()
print("lost:", driver.lost(), "count:", driver.session.range(3).count(), flush=True)
driver.stop()
'''


def test_a_context_spark_stopped_is_one_line_and_a_new_session_runs_in_the_same_jvm():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("lost:")] == [
        "lost: None",
        "lost: Spark stopped the context: the cluster removed the application",
        "lost: None count: 3"]
    ended = [line for line in lines if line.startswith("event=spark_thread_ended")]
    assert len(ended) == 1 and "thread=after-the-stop" in ended[0]
    assert 'Exception in thread "while-running"' in done.stderr  # a bug's death is printed whole
    assert "after-the-stop" not in done.stderr
