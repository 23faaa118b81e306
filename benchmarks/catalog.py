"""What each `make bench` case measures, how long it runs, its target, and
the figure its chart follows: the data docs/benchmarks.md is drawn from
(`python -m benchmarks.charts`). Pure data: no case is imported here."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Headline:
    report: str  # the bench= name of the lines it reads
    figure: str  # the figure it follows
    label: str  # the figure's series: one per value of this label ("" for one series)
    unit: str
    only: tuple[tuple[str, str], ...] = ()  # lines kept: (label, value)
    goal: float | None = None  # the target, drawn as a line

    @property
    def name(self) -> str:
        return "-".join([self.report, self.figure, *(value for _, value in self.only)])


@dataclass(frozen=True)
class Case:
    what: str
    minutes: int  # about, on this 2-core machine, before a run has timed it
    target: str
    headlines: tuple[Headline, ...]
    quick: bool = False  # in `make bench-quick`


CASES: dict[str, Case] = {
    "stack_startup": Case("the dev stack's broker and Postgres up, plaintext and Heroku-like (TLS, ACLs)", 1, "",
                          (Headline("stack_startup", "median_s", "mode", "s"),), quick=True),
    "startup": Case("each worker alone to its first batch stored, 1,000 records waiting, the broker's 3 s join hold",
                    4, "at most 6.6 s", (Headline("startup", "first_batch_s_median", "worker", "s", goal=6.6),),
                    quick=True),
    "cold_start": Case("each worker cold, a static member, on a backlog (400,000 lines, 2,000,000 words, "
                       "800,000 log lines; 4 partitions; with the 3 s hold and without): to its first commit and "
                       "to drained", 16,
                       "first commit 6 s",
                       (Headline("cold_start", "first_commit_s_median", "worker", "s", goal=6),
                        Headline("cold_start", "per_s_median", "worker", "records/s"),
                        Headline("cold_start_no_hold", "per_s_median", "worker", "records/s")), quick=True),
    "kafka_streams_cold_start": Case("the seeds' topologies on Kafka Streams, as the seeds and tuned, cold on "
                                     "`cold_start`'s backlogs, on brokers with and without the 3 s hold", 24,
                                     "the project at 1.0 times the tuned peer's rate or more, on both brokers",
                                     (Headline("kafka_streams_cold_start", "per_s_median", "worker", "records/s"),
                                      Headline("kafka_streams_tuned_cold_start_no_hold", "per_s_median", "worker",
                                               "records/s"))),
    "kafka_clients_limit": Case("each job by hand on the Kafka clients (two threads, at least once, counts COPYed), "
                                "cold on `cold_start`'s backlogs, on brokers with and without the 3 s hold: "
                                "the limit on these 2 cores", 12, "",
                                (Headline("kafka_clients_limit_cold_start_no_hold", "per_s_median", "worker",
                                          "records/s"),)),
    "kafka_tools_limit": Case("the text backlog through Kafka's console tools and `tr`, then the text processor",
                              5, "the text processor at 0.6 of the tools' rate",
                              (Headline("kafka_tools_limit", "share_of_tools", "", "share", goal=0.6),)),
    "restart": Case("a text processor on a backlog SIGKILLed, SIGTERMed, restarted: to its partitions' next batch",
                    6, "SIGKILL at most 10 s", (Headline("restart", "seconds_median", "fault", "s",
                                                         (("member", "static"),), goal=10),), quick=True),
    "restart_tls": Case("a crashed copy on Heroku's kind of broker (TLS, ACLs, 8 partitions) under a steady stream",
                        10, "at most 10 s; a SIGTERM handover 5 s",
                        (Headline("restart_tls", "seconds_median", "worker", "s", (("fault", "sigkill"),), goal=10),)),
    "kafka_plans": Case("the line rate end to end (text processor and aggregator) under each of Heroku's basic plans' "
                        "quotas, on a Heroku-like broker", 6, "",
                        (Headline("kafka_plans", "lines_per_s", "plan", "lines/s"),)),
    "levers": Case("each start-up lever off against on, cold on a quarter of `cold_start`'s backlogs", 25,
                   "each lever worth its place",
                   (Headline("levers", "first_commit_s_off", "lever", "s", (("worker", "aggregator"),)),)),
    "latency": Case("the three side by side at 1,000 lines a second: a line to its count, a failed login to its "
                    "alert; on a plaintext broker, then on a TLS one with client certificates; a slow hour "
                    "(`_slow`) with `BENCH_LATENCY_CPUS=1.4`", 16,
                    "p99 3 s and 1 s on both, in a slow hour too",
                    (Headline("latency_line_to_count", "p99_s", "", "s", goal=3),
                     Headline("latency_failed_login_to_alert", "p99_s", "", "s", goal=1),
                     Headline("latency_line_to_count_tls", "p99_s", "", "s", goal=3),
                     Headline("latency_failed_login_to_alert_tls", "p99_s", "", "s", goal=1),
                     Headline("latency_line_to_count_tls_slow", "p99_s", "", "s", goal=3),
                     Headline("latency_failed_login_to_alert_tls_slow", "p99_s", "", "s", goal=1))),
    "batch_overhead": Case("a micro-batch's fixed cost: 10 rows from Spark's rate source to `noop`", 1, "",
                           (Headline("batch_overhead", "filesystem_ms_per_batch_median", "", "ms"),), quick=True),
    "text_processor": Case("1,000,000 lines drained, then a steady 200 lines a second", 3, "20,000 lines/s",
                           (Headline("text_processor_drain", "lines_per_s_after_first", "", "lines/s", goal=20_000),),
                           quick=True),
    "aggregator": Case("5,000,000 words drained into Postgres, then probes", 3, "250,000 words/s",
                       (Headline("aggregator_drain", "words_per_s_after_first", "", "words/s", goal=250_000),),
                       quick=True),
    "anomaly_detector": Case("2,000,000 log lines drained, then 100 probe users", 3, "100,000 lines/s; alert p99 2 s",
                             (Headline("anomaly_drain", "lines_per_s_after_first", "", "lines/s", goal=100_000),),
                             quick=True),
    "dead_letter_flood": Case("each worker on 200,000 bad records (each a dead letter) against as many good ones",
                              6, "a flood's batches at most 2 times as long, its memory 1.2 times",
                              (Headline("dead_letter_flood", "time_factor", "worker", "times", goal=2),)),
    "web": Case("the dashboard's endpoints over 10,000,000 rows", 5, "",
                (Headline("web", "p99_ms", "endpoint", "ms"),)),
    "cluster": Case("the text processor and the aggregator on a standalone Spark cluster against `local[2]`", 5, "",
                    (Headline("cluster_aggregator", "words_per_s", "spark", "words/s"),)),
    "soak": Case("the three side by side for an hour at 300 lines a second: resident memory", 62, "820 MB, flat",
                 (Headline("soak", "rss_mb_peak", "worker", "MB", goal=820),)),
}

QUICK = [name for name, case in CASES.items() if case.quick]
