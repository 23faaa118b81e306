"""The generators stream what they are told to, at the rate they are told."""

import subprocess
import sys

from devstack.kafka_io import read_all
from devstack.local_stack import ROOT


def run_generator(stack, prefix, module, *args):
    env = {"PATH": "/usr/bin:/bin", **stack.environment(prefix)}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=True)


def test_textlines_generator_streams_a_file_once(stack, prefix, tmp_path):
    text = tmp_path / "moby.txt"
    text.write_text("Call me Ishmael.\nSome years ago—never mind how long\n\nprecisely…\n")
    done = run_generator(stack, prefix, "devstack.textlines", "--file", str(text),
                         "--rate", "0")
    records = read_all(stack, prefix + "textlines", 4)
    assert sorted(r.value.decode() for r in records) == sorted(
        ["Call me Ishmael.", "Some years ago—never mind how long", "", "precisely…"])
    assert "event=generated" in done.stdout and "sent=4" in done.stdout


def test_textlines_generator_makes_up_sentences_at_a_rate(stack, prefix):
    done = run_generator(stack, prefix, "devstack.textlines",
                         "--count", "30", "--rate", "20")
    records = read_all(stack, prefix + "textlines", 30)
    assert len(records) == 30 and all(r.value.strip() for r in records)
    assert "event=progress" in done.stdout
    # 30 lines at 20 a second: 29 gaps of 50 ms between the first and the
    # last one's produce time. All at once would take milliseconds.
    stamps = sorted(r.timestamp for r in records)
    assert 1.3 <= (stamps[-1] - stamps[0]) / 1000 <= 10


def test_loglines_generator_uses_the_given_users_and_failure_probability(stack, prefix):
    run_generator(stack, prefix, "devstack.loglines", "--count", "400",
                  "--rate", "0", "--user", "alice", "--user", "bob", "--failure-probability", "0.25")
    lines = [r.value.decode() for r in read_all(stack, prefix + "loglines", 400)]
    assert len(lines) == 400
    assert {line.split("|")[0].strip() for line in lines} == {"user_id: alice", "user_id: bob"}
    failed = sum("action: login failed" in line for line in lines)
    assert 60 <= failed <= 140  # 100 expected; far outside this would be a broken generator
