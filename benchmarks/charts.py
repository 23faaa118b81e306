"""docs/benchmarks.md's table and charts, drawn from benchmarks/results.jsonl:

    python -m benchmarks.charts     # `make bench-charts`

One row per case (benchmarks.catalog: what it measures, its command and how
long it runs, its latest figures with their spread, its target) and one
chart per headline figure over time (docs/benchmarks/<headline>.png, with
the machine's gauge beside it), written between the page's markers.
"""

import re
import statistics
from collections import defaultdict
from datetime import datetime, timedelta

from benchmarks import results
from benchmarks.catalog import CASES, Headline

PAGE = results.ROOT / "docs" / "benchmarks.md"
CHARTS = results.ROOT / "docs" / "benchmarks"
BEGIN, END = "<!-- drawn by python -m benchmarks.charts: edit benchmarks/catalog.py -->", "<!-- end of drawn -->"
SPREAD = timedelta(hours=24)  # a figure's spread: its runs within a day of its latest


def when(result: results.Result) -> datetime:
    return datetime.strptime(result.utc, "%Y-%m-%dT%H:%M:%SZ")


def series(headline: Headline, kept: list[results.Result]) -> dict[str, list[results.Result]]:
    """The results a headline follows, by its label's value, oldest first."""
    lines: dict[str, list[results.Result]] = defaultdict(list)
    for result in kept:
        figures = result.figures
        if result.env.get("LEVERS_OFF"):  # a lever's worth, not the product's figure (the levers' record has it)
            continue
        if (result.case == headline.report and headline.figure in figures
                and all(str(figures.get(label)) == value for label, value in headline.only)):
            lines[str(figures.get(headline.label, "")) if headline.label else ""].append(result)
    return {label: sorted(runs, key=when) for label, runs in sorted(lines.items())}


def newest(run: results.Result) -> tuple[int, datetime]:
    """A run's place: its version's in the history, then its time."""
    return (run.order if run.order is not None else -1, when(run))


def latest(headline: Headline, kept: list[results.Result]) -> str:
    """Each series' figure of its newest version (the last run of it), and
    the least and most of that version's runs within a day of it."""
    parts, lasts = [], []
    for label, runs in series(headline, kept).items():
        last = max(runs, key=newest)
        day = [run.figures[headline.figure] for run in runs
               if run.commit == last.commit and when(run) >= when(last) - SPREAD]
        value = f"{_number(last.figures[headline.figure])} {headline.unit}"
        spread = f" ({_number(min(day))} to {_number(max(day))}, {len(day)} runs)" if len(day) > 1 else ""
        parts.append(f"{label + ' ' if label else ''}{value}{spread}")
        lasts.append(last)
    if not parts:
        return "not run since the figures are kept"
    last = max(lasts, key=newest)
    return f"{'; '.join(parts)} (`{last.commit}`, {last.utc[:10]})"


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def table(kept: list[results.Result]) -> str:
    runs = results.run_seconds(kept)
    rows = ["| case | what it measures | runs for | latest (spread over a day) | target |", "|---|---|---|---|---|"]
    for name, case in CASES.items():
        took = f"{runs[name] / 60:.0f} min" if name in runs else f"about {case.minutes} min"
        figures = "<br>".join(f"{h.figure if h.report == name else f'{h.report} {h.figure}'}: {latest(h, kept)}"
                              for h in case.headlines)
        rows.append(f"| `{name}`{' (quick)' if case.quick else ''} | {case.what} | {took} | {figures} | "
                    f"{case.target or '-'} |")
    charts = [f"![{h.name}](benchmarks/{h.name}.png)" for case in CASES.values() for h in case.headlines
              if series(h, kept)]
    return "\n".join([BEGIN, "", *rows, "", *charts, "", END])


def page(text: str, kept: list[results.Result]) -> str:
    """The page with its drawn part replaced."""
    drawn = re.compile(re.escape(BEGIN) + ".*" + re.escape(END), re.S)
    assert drawn.search(text), f"{PAGE} has no {BEGIN} ... {END}"
    return drawn.sub(lambda _: table(kept), text)


def draw(headline: Headline, kept: list[results.Result]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axis = pyplot.subplots(figsize=(7, 2.6), dpi=90)
    gauges = []
    for label, runs in series(headline, kept).items():
        axis.plot([when(run) for run in runs], [run.figures[headline.figure] for run in runs], "o-",
                  label=label or headline.figure, markersize=3)
        gauges += [(when(run), run.gauge_s) for run in runs if run.gauge_s is not None]
    if headline.goal is not None:
        axis.axhline(headline.goal, color="red", linestyle="--", linewidth=0.8, label="target")
    axis.set_ylim(bottom=0)
    axis.set_title(f"{headline.report}: {headline.figure}", fontsize=9)
    axis.set_ylabel(headline.unit, fontsize=8)
    axis.tick_params(labelsize=7)
    if gauges:  # the machine's speed that hour: higher is slower
        speed = axis.twinx()
        speed.plot(*zip(*sorted(gauges), strict=True), "x", color="grey", markersize=3)
        speed.set_ylabel("gauge s", fontsize=7, color="grey")
        speed.set_ylim(0, statistics.median(g for _, g in gauges) * 3)
        speed.tick_params(labelsize=6, colors="grey")
    axis.legend(fontsize=6, loc="upper left")
    figure.autofmt_xdate()
    figure.tight_layout()
    figure.savefig(CHARTS / f"{headline.name}.png")
    pyplot.close(figure)


def main() -> None:
    kept = results.read()
    CHARTS.mkdir(exist_ok=True)
    for case in CASES.values():
        for headline in case.headlines:
            if series(headline, kept):
                draw(headline, kept)
    PAGE.write_text(page(PAGE.read_text(), kept))


if __name__ == "__main__":
    main()
