"""report.html: one self-contained page (plotly.js inline, no network) that answers "which setup
solves the most per dollar": banners for what makes the figures partial, the answer in a line,
cost per solved task against tasks solved, the per-setup table (cost columns first), the rates,
where money and time went, paired differences, the task x setup grid and the bill."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from agentcompass.report.bill import seconds
from agentcompass.report.charts import chart_html, coinciding, pareto, plotted
from agentcompass.report.flags import flagged_banner
from agentcompass.report.page_tables import (bill_table, costs_table, hours, moment, pairs_table, points, setups_table,
                                             signed_usd, task_grid, usd)

STYLE = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1352px}
h1{margin:0 0 8px}h2{margin:28px 0 6px;font-size:20px}
table{border-collapse:collapse;margin:8px 0;font-size:13px;width:100%}
th,td{border:1px solid #d6d6d6;padding:4px 7px;text-align:right;vertical-align:top}
th{background:#f3f4f6;font-weight:600}th small,.ci{color:#666;font-weight:400}
.ci{display:block;font-size:11px;white-space:nowrap}
td.name,td.basis,th:first-child{text-align:left}td.name{font-weight:600}td.basis{font-size:12px;color:#555}
.unknown .v{color:#a33;font-style:italic}.warn{color:#a33;font-weight:600}.money .v{font-weight:700}
.front{color:#c90}.differs .v{font-weight:700}.same{color:#777}
table.grid,table.pairs,table.bill{width:auto}h3{font-size:16px;margin:14px 0 4px}table.pairs th:nth-child(2){text-align:left}table.grid td{white-space:nowrap;font-size:12px}td.none{color:#999}
.note{color:#555;font-size:13px;margin:6px 0}
.answer{font-size:15px;margin:10px 0;padding:8px 14px 8px 30px;background:#f7f7f2;border-left:4px solid #c90}
.banner{border-radius:6px;padding:10px 14px;margin:8px 0;font-size:14px}
.banner.incomplete{background:#fff4e5;border:1px solid #f0a040}.banner.uncovered{background:#fde8e8;border:1px solid #d05050}
.banner.estimate{background:#eef4fb;border:1px solid #8fb2d9}
.scroll{overflow-x:auto}.runs{color:#444;font-size:14px;margin:0 0 10px}
/* Narrow windows (a phone, a docs column, 800 px): the wide tables become one card per setup, label beside each
   figure, so no column is hidden and the page never scrolls sideways. */
@media (max-width:1000px){body{margin:12px}
table.cards,table.cards tbody,table.cards tr,table.cards td{display:block;width:auto}table.cards thead{display:none}
table.cards tr{border:1px solid #d6d6d6;border-radius:6px;margin:0 0 10px;padding:4px 0}
table.cards td{border:0;border-bottom:1px solid #eee;display:flex;justify-content:space-between;gap:12px;text-align:right}
table.cards td::before{content:attr(data-label);text-align:left;color:#555;font-weight:600}
table.cards td.name{background:#f3f4f6}table.cards .ci{display:inline;margin-left:6px}}"""


def order(setups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cheapest solved task first; setups without a cost per solved task last, by how much they solved."""
    return sorted(setups, key=lambda s: (s["cost_per_solved_usd"] is None,
                                         float(s["cost_per_solved_usd"] or 0), -(s["solved_rate"] or 0), s["label"]))


def incomplete(s: dict[str, Any]) -> list[str]:
    """What makes this setup's figures partial: the run's status, missing attempts, errors kept out."""
    why = []
    if s.get("status") not in (None, "completed"):
        why.append(f"run {s['status']}" if s["status"] != "running" else "run still running (or killed)")
    if s.get("trials_expected") and s["attempts"] < s["trials_expected"]:
        why.append(f"{s['attempts']} of {s['trials_expected']} attempts recorded")
    if s.get("incomplete"):
        why.append(f"{s['incomplete']} attempt(s) have no verdict ({s['scoring_rule']}: kept out of the rates)")
    if s.get("tampering"):
        why.append(f"in {s['tampering']} attempt(s) the agent wrote where the verifier reads (graded on fresh inputs)")
    if s.get("tampered"):
        why.append(f"{s['tampered']} attempt(s) failed for evidence the agent attacked its verdict or the count (in the base)")
    if s.get("interrupted_attempts"):
        why.append(f"{s['interrupted_attempts']} attempt(s) interrupted before they were recorded (their model time is priced)")
    return why


def banners(report: dict[str, Any]) -> list[str]:
    out = []
    partial = [(s, incomplete(s)) for s in report["setups"]]
    items = "".join(f"<li><b>{escape(s['label'])}</b>: {escape('; '.join(why))}</li>" for s, why in partial if why)
    if items:
        out.append(f'<div class="banner incomplete" id="banner-incomplete"><b>Incomplete runs</b>: their rates '
                   f"cover only the attempts recorded.<ul>{items}</ul></div>")
    bill = report.get("billing") or {}
    uncovered = bill.get("uncovered_s") or 0
    named = {name for g in bill.get("groups") or [] for name in g.get("uncovered_setups") or []}
    unknown = [s for s in report["setups"] if s["setup"] in named or (not named and s["total_cost_usd"] is None)]
    if uncovered > 0:
        who = ", ".join(escape(s["label"]) for s in unknown)
        out.append(f'<div class="banner uncovered" id="banner-uncovered"><b>The bill does not cover the run</b>: '
                   f"{uncovered:,.0f} s of generation fall outside every bill interval"
                   + (f"; cost unknown for {who}" if who else "") + ". Pass a bill for the whole run.</div>")
    if report["pricing"].get("estimate") and any("hourly split" in (s["cost_basis"] or "") for s in report["setups"]):
        out.append('<div class="banner estimate" id="banner-estimate">Self-hosted costs are <b>estimates</b> from an '
                   "hourly rate, not a bill: pass <code>--bill</code> for the real figure.</div>")
    flagged = flagged_banner(report["setups"])
    if flagged:
        out.append(flagged)
    return out


def oriented(pair: dict[str, Any], first: str, figure: str) -> tuple[float, float | None, float | None, Any] | None:
    """A pair's difference as `first` minus the other: (difference, low, high, differs)."""
    d = pair[figure]
    if d["diff"] is None:
        return None
    value, low, high = (None if v is None else float(v) for v in (d["diff"], d["low"], d["high"]))
    return (value, low, high, d["differs"]) if pair["a"] == first else (-value, None if high is None else -high,
                                                                       None if low is None else -low, d["differs"])


def verdict(pair: dict[str, Any], first: str, figure: str, shown: Any, what: str) -> str:
    found = oriented(pair, first, figure)
    if found is None:
        return ""
    value, low, high, differs = found
    bounds = f"{'-∞' if low is None else shown(low)} – {'∞' if high is None else shown(high)}"
    return (f"{escape(shown(value))} {what} (95 %: {escape(bounds)}), "
            + ("<b>a real difference</b>" if differs else "which these tasks cannot tell from 0"))


def answer(setups: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> str:
    """The question in a few lines: the cheapest solved task, the most solved, whether the two really
    differ (their paired difference), and the front between them."""
    # A known cost of $0 (no model calls) ranks too, first: only the chart, on its log axis, cannot place it.
    placed = [s for s in setups if s["cost_per_solved_usd"] is not None and s["solved_rate"] is not None]
    if not placed:
        return '<p class="answer">No setup has both a known cost and a solved task, so none can be ranked by cost per solved task.</p>'
    cheapest = min(placed, key=lambda s: (float(s["cost_per_solved_usd"]), -s["solved_rate"]))
    most = max(placed, key=lambda s: (s["solved_rate"], -float(s["cost_per_solved_usd"])))

    def said(s: dict[str, Any]) -> str:
        low, high = s["cost_per_solved_low_usd"], s["cost_per_solved_high_usd"]
        interval = f" (95 %: {usd(low)} – {'∞' if high is None else usd(high)})" if low is not None else ""
        return (f"<b>{escape(s['label'])}</b> at {escape(usd(s['cost_per_solved_usd']))} per solved task{escape(interval)}, "
                f"{s['solved_tasks']} of {s['tasks']} tasks solved")

    free = float(cheapest["cost_per_solved_usd"]) == 0  # no model spend: "per dollar" would divide by nothing
    lines = [f"{'Cheapest per solved task' if free else 'Most solved per dollar'}: {said(cheapest)}."]
    if most["setup"] != cheapest["setup"]:
        lines.append(f"Most solved: {said(most)}.")
        pair = next((p for p in pairs if {p["a"], p["b"]} == {most["setup"], cheapest["setup"]}), None)
        if pair is not None:
            parts = [verdict(pair, most["setup"], "cost_per_solved_usd", signed_usd, "per solved task"),
                     verdict(pair, most["setup"], "solved_rate", points, "solved")]
            lines.append(f"Paired on the same {pair['tasks']} tasks, {escape(most['label'])} minus "
                         f"{escape(cheapest['label'])}: " + "; ".join(p for p in parts if p) + ".")
    lines.append("Pareto front (★, no other setup solves as many for less): "
                 + ", ".join(escape(s["label"]) for s in pareto(setups, placed)) + ".")
    return '<ul class="answer" id="answer">' + "".join(f"<li>{line}</li>" for line in lines) + "</ul>"


BILL_FACTS = (  # (field, what it is, how shown): each shown when the bill step records it
    ("bill_usd", "bill for the hours of the run", "usd"),
    ("outside_window_usd", "of which outside the jobs' active window", "usd"),
    ("billed_usd", "billed to the run", "usd"),
    ("split_usd", "split among attempts", "usd"),
    ("unattributed_usd", "unattributed (covered, but no generation)", "usd"),
    ("window_s", "jobs' active window", "hours"),
    ("covered_s", "covered by the run's jobs", "hours"),
    ("uncovered_s", "generation outside the bill", "hours"),
    ("effective_hourly_usd", "effective $/h (billed / covered hours)", "usd"),
)


def bill_group(group: dict[str, Any], index: int) -> str:
    """One bill (one endpoint's): its totals, then one row per interval."""
    facts = [(name, usd(group[field]) if shown == "usd" else hours(group[field] or 0))
             for field, name, shown in BILL_FACTS if field in group]
    if group.get("window_start"):
        facts.insert(0, ("jobs' window", f"{moment(group['window_start'])} – {moment(group.get('window_end'))}"))
    listed = "".join(f'<tr><th>{escape(name)}</th><td data-figure="billing:{index}:{escape(name)}"><span class="v">'
                     f"{escape(value)}</span></td></tr>" for name, value in facts)
    intervals = group.get("intervals") or group.get("buckets") or []
    who = f"{escape(str(group['endpoint']))}: " if group.get("endpoint") else ""
    return (f'<h3>{who}{escape(str(group.get("source")))}</h3><table class="bill-totals" style="width:auto">{listed}</table>'
            + (f'<div class="scroll">{bill_table(intervals, index)}</div>' if intervals else ""))


def bill_section(billing: dict[str, Any] | None) -> str:
    """Each bill the report used: one per billed endpoint when the report records groups."""
    if not billing:
        return ""
    groups = billing.get("groups") or [billing]
    return '<h2 id="bill">The bill</h2>' + "".join(bill_group(g, i) for i, g in enumerate(groups))


def pairs_section(pairs: list[dict[str, Any]], labels: dict[str, str]) -> str:
    """The pairs table; folded when long (a sweep of 20 setups has 190 pairs), its summary counting those that differ."""
    if not pairs:
        return '<p class="note">No two setups were run on the same tasks.</p>'
    differ = sum(bool(p["cost_per_solved_usd"]["differs"]) for p in pairs)
    return (f'<details{" open" if len(pairs) <= 15 else ""}><summary>{len(pairs)} pair(s); {differ} differ in $ per solved '
            f"task</summary>{pairs_table(pairs, labels)}</details>")


def why_not_plotted(s: dict[str, Any]) -> str:
    if s["total_cost_usd"] is None:
        return "cost unknown"
    return "none solved" if not s["solved_tasks"] else "$0 per solved task: a log axis has no 0"


def viewer_links(setups: list[dict[str, Any]], viewer: dict[str, str]) -> str:
    """Links into a running `agentcompass view` (not a figure: --verify leaves it out)."""
    links = [f'<a href="{escape(viewer[s["setup"]])}">{escape(s["label"])}</a>' for s in setups if s["setup"] in viewer]
    return f'<p class="note" id="viewer-links">Trajectories in agentcompass view: {", ".join(links)}</p>' if links else ""


def day(value: Any) -> str:
    return moment(value)[:10] if value else "?"


def runs_line(report: dict[str, Any]) -> tuple[str, str]:
    """(title, header line): which runs of which benchmarks, and the dates they ran, so a published page says
    what it is about without its CSVs."""
    setups = report["setups"]
    runs = [Path(p).name for p in report["inputs"]]
    benchmarks = sorted({str(s.get("benchmark")) for s in setups if s.get("benchmark")})
    starts = [s["first_started_at"] for s in setups if s.get("first_started_at")]
    ends = [s["last_finished_at"] for s in setups if s.get("last_finished_at")]
    first = day(min(starts, key=seconds)) if starts else "?"
    last = day(max(ends, key=seconds)) if ends else "?"
    dates = first if first == last else f"{first} – {last}"
    what = ", ".join(benchmarks) or "benchmark unknown"
    title = f"{what}: {len(setups)} setup(s), {dates}"
    line = (f"Benchmark: <b>{escape(what)}</b> · runs: {escape(', '.join(runs))} · ran {escape(dates)} (UTC) · "
            "<b>pass@1</b>: share of attempts that passed; <b>pass@k</b>: share of tasks solved in k attempts")
    return title, line


def render(report: dict[str, Any], viewer: dict[str, str] | None = None) -> str:
    """The page; `viewer`: setup -> its grid in a running viewer, linked under the heading."""
    setups = order(report["setups"])
    labels = {s["setup"]: s["label"] for s in setups}
    cost_chart, rates_chart, breakdown_chart = chart_html(setups)
    stats = report["statistics"]
    left_out = [s for s in setups if s not in plotted(setups)]
    missing = ("<p class=\"note\">Not on the chart: " + ", ".join(
        f"{escape(s['label'])} ({why_not_plotted(s)})" for s in left_out)
        + ".</p>") if left_out else ""
    for group in coinciding(setups):
        missing += (f'<p class="note">On one spot (drawn as rings, largest first): '
                    f'{escape(", ".join(s["label"] for s in group))}.</p>')
    pairs = stats["pairs"]
    title, runs = runs_line(report)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)} · agentcompass report</title><style>{STYLE}</style></head>
<body>
<h1>Which setup solves the most per dollar?</h1>
<p class="runs" id="runs">{runs}</p>
{viewer_links(setups, viewer or {})}
{''.join(banners(report))}
{answer(setups, report["statistics"]["pairs"])}
<section>{cost_chart}</section>
<p class="note">Each point is a setup: further left is cheaper per solved task, higher solves more. Bars are 95 %
intervals ({escape(str(stats['resamples']))} bootstrap resamples over tasks); the dashed line joins the setups no other
beats on both. Colour: model (darker: higher reasoning tier); marker: harness.</p>{missing}
<h2>Per setup</h2>
{setups_table(setups)}
<h2>Rates</h2>
<section>{rates_chart}</section>
<h2>Where the money and the time went</h2>
<section>{breakdown_chart}</section>
{costs_table(setups)}
<h2>Are they really different? Paired differences</h2>
<p class="note">For each pair of setups run on the same tasks: a − b, resampled on the same tasks. <b>Bold</b>: the 95 %
interval excludes 0 (the tasks tell the two apart); grey: it holds 0 (these tasks cannot tell them apart).</p>
{pairs_section(pairs, labels)}
<h2>Per task</h2>
<p class="note">Passed / graded attempts and what all the task's attempts cost; hardest tasks first.</p>
<div class="scroll">{task_grid(report["tasks"], [r["task_id"] for r in report["task_difficulty"]], setups)}</div>
{bill_section(report.get("billing"))}
<h2>How the figures were made</h2>
<p class="note">Costs: {escape(report['pricing']['description'])}. A cost shown as <i>unknown</i> could not be known
(no price, no rate, no call records, generation outside the bill); it is never 0. Intervals: {escape(stats['method'])};
{stats['resamples']} resamples, seed {stats['seed']}, {round(100 * stats['confidence'])} % percentile intervals.
Generated {escape(report['generated_at'])} from {len(report['inputs'])} results directory(ies).</p>
</body></html>
"""

