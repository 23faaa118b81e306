"""`make bench`'s figures kept as data, and the page drawn from them."""

from benchmarks import charts, results
from benchmarks.__main__ import CASES
from benchmarks.catalog import CASES as CATALOG
from benchmarks.catalog import Headline


def test_a_report_line_is_kept_with_its_commit_time_and_the_hours_gauge(tmp_path, monkeypatch):
    from benchmarks.harness import report

    monkeypatch.setattr(results, "RESULTS", tmp_path / "results.jsonl")
    monkeypatch.setenv("BENCH_RUNS", "3")
    monkeypatch.setenv("LEVERS_OFF", "phase")
    report("cold_start", worker="aggregator", first_commit_s_median=5.12345, runs=3)
    results.run("cold_start", 480.04)
    figures, run = results.read()
    assert (figures.case, figures.figures) == ("cold_start", {"worker": "aggregator", "first_commit_s_median": 5.123,
                                                              "runs": 3})
    assert figures.commit == results.commit() and len(figures.commit) >= 7 and figures.utc.endswith("Z")
    assert figures.gauge_s is not None and figures.gauge_s > 0 and run.gauge_s == figures.gauge_s
    assert figures.order == results.order_of(figures.commit)  # its place in the history, kept with it
    assert (run.run_s, run.figures) == (480.0, {})
    assert figures.env == run.env == {"BENCH_RUNS": "3", "LEVERS_OFF": "phase"}  # the knobs it ran with


def test_a_case_runs_for_what_its_last_run_without_knobs_took():
    whole = results.Result("latency", "a", "2026-12-06T13:35:00Z", 0.05, run_s=835.8)
    part = results.Result("latency", "b", "2026-12-06T16:28:00Z", 0.05, run_s=452.7,
                          env={"BENCH_LATENCY_BROKERS": "tls", "BENCH_LATENCY_CPUS": "1.4"})
    assert results.run_seconds([whole, part]) == {"latency": 835.8}


def test_bench_lines_run_before_the_file_was_kept_parse_as_figures():
    line = "new 20:41 bench=restart fault=sigkill member=static runs=3 seconds_median=3.972 seconds_max=4.063"
    assert list(results.parsed(["WARNING: noise", line])) == [
        ("restart", {"fault": "sigkill", "member": "static", "runs": 3, "seconds_median": 3.972, "seconds_max": 4.063})]


def test_every_case_is_in_the_catalog():
    assert list(CATALOG) == list(CASES)


def test_a_run_with_a_lever_off_is_kept_but_no_headlines_figure():
    headline = Headline("latency_line_to_count", "p99_s", "", "s")
    on = results.Result("latency_line_to_count", "a", "2026-12-04T10:00:00Z", 0.4, {"p99_s": 2.0})
    off = results.Result("latency_line_to_count", "a", "2026-12-04T10:10:00Z", 0.4, {"p99_s": 2.8},
                         env={"LEVERS_OFF": "phase"})
    assert charts.series(headline, [on, off]) == {"": [on]}


def test_a_headlines_latest_figure_comes_with_its_spread_over_a_day():
    headline = Headline("restart", "seconds_median", "fault", "s", (("member", "static"),))
    kept = [results.Result("restart", "aaa1111", utc, 0.4, {"fault": "sigkill", "member": member, "seconds_median": s})
            for utc, member, s in [("2026-12-01T10:00:00Z", "static", 9.0), ("2026-12-04T09:00:00Z", "static", 4.5),
                                   ("2026-12-04T10:00:00Z", "static", 4.0), ("2026-12-04T10:00:00Z", "dynamic", 31.0)]]
    assert charts.latest(headline, kept) == "sigkill 4.00 s (4.00 to 4.50, 2 runs) (`aaa1111`, 2026-12-04)"
    # An older version measured after it (a before/after pair) is not the latest.
    older = results.Result("restart", "bbb2222", "2026-12-04T11:00:00Z", 0.4,
                           {"fault": "sigkill", "member": "static", "seconds_median": 3.0}, order=1)
    newer = [results.Result(**{**run.__dict__, "order": 2}) for run in kept]
    assert charts.latest(headline, [*newer, older]).startswith("sigkill 4.00 s")


def test_the_benchmarks_page_and_its_charts_are_drawn_from_the_kept_results():
    kept = results.read()
    text = charts.PAGE.read_text()
    assert charts.page(text, kept) == text, "docs/benchmarks.md is not what the results draw: make bench-charts"
    for case in CATALOG.values():
        for headline in case.headlines:
            if charts.series(headline, kept):
                assert (charts.CHARTS / f"{headline.name}.png").is_file(), headline.name
