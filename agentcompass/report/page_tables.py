"""The page's tables as HTML. Every number printed is a cell marked `data-figure="<key>"`, so that
`--verify` can read the page's figures back and compare them with a fresh rendering."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from html import escape, unescape
from typing import Any, Iterable

from agentcompass.report.charts import pareto


def usd(value: Any) -> str:
    if value is None:
        return "unknown"
    amount = float(value)
    sign = "-" if amount < 0 else ""
    return sign + (f"${abs(amount):,.2f}" if abs(amount) >= 1 else f"${abs(amount):.4f}")


def signed_usd(value: Any) -> str:
    return usd(value) if value is None or float(value) < 0 else "+" + usd(value)


def percent(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f} %"


def points(value: Any) -> str:
    """A difference of two rates, in percentage points."""
    return "-" if value is None else f"{100 * float(value):+.1f} pts"


def count(value: Any) -> str:
    """1,234 / 85.7k / 1.2M / 1.25B: token counts at a glance."""
    if value is None:
        return "-"
    n = float(value)
    for at_least, size, unit, places in ((1e9, 1e9, "B", 2), (1e6, 1e6, "M", 1), (1e4, 1e3, "k", 1)):
        if n >= at_least:
            return f"{n / size:.{places}f}{unit}"
    return f"{n:,.0f}"


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 360 else f"{seconds:.1f} s"


def span(low: Any, high: Any, shown: Any) -> str:
    """The interval under its figure; an open upper end (a resample solved nothing) is ∞."""
    if low is None and high is None:
        return ""
    return f'<span class="ci">{escape(shown(low))} – {"∞" if high is None else escape(shown(high))}</span>'


def figure(key: str, text: str, extra: str = "", cls: str = "") -> str:
    """A cell holding one printed figure: its text is what verify reads back."""
    klass = f' class="{cls}"' if cls else ""
    return f'<td data-figure="{escape(key)}"{klass}><span class="v">{escape(text)}</span>{extra}</td>'


def html_table(table_id: str, head: Iterable[str], rows: Iterable[str], cls: str = "") -> str:
    header = "".join(f"<th>{h}</th>" for h in head)
    return (f'<table id="{table_id}" class="{cls}"><thead><tr>{header}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def no_ratio(row: dict[str, Any], value: Any, denominator: str, why: str) -> str | None:
    """A ratio with nothing to divide by is not an unknown cost: say so instead."""
    return why if value is None and row.get(denominator) == 0 else None


def setups_table(setups: list[dict[str, Any]]) -> str:
    """Cost first: what a solved task costs, then how much was solved (pass@k, pass@1, as the cost benchmark names
    them), then what it took and how busy the endpoint was."""
    front = {s["setup"] for s in pareto(setups)}
    head = ["setup (model · tier · harness)", "$ per solved task<br><small>95 % interval</small>", "total cost",
            "$ per attempt", "$ per passing run", "solved", "pass@k<br><small>tasks solved · 95 % interval</small>",
            "pass@1<br><small>attempts passed · 95 % interval</small>", "attempts", "errors",
            "concurrency<br><small>peak / average</small>", "tokens per solved<br><small>in / out</small>", "cost basis"]
    analysed = any(s.get("analysed") for s in setups)  # `agentcompass analyze` ran on one: its figures beside ours
    if analysed:
        head[6:6] = ["solved, not flagged<br><small>by agentcompass analyze</small>",
                     "$ per solved task, not flagged"]
    rows = []
    for s in setups:
        key = f"setup:{s['setup']}:"
        per_solved = no_ratio(s, s["cost_per_solved_usd"], "solved_tasks", "n/a: none solved") or usd(s["cost_per_solved_usd"])
        per_attempt = no_ratio(s, s["avg_cost_per_attempt_usd"], "attempts", "n/a") or usd(s["avg_cost_per_attempt_usd"])
        per_pass = (no_ratio(s, s["cost_per_passing_attempt_usd"], "passed", "n/a: none passed")
                    or usd(s["cost_per_passing_attempt_usd"]))
        star = ' <span class="front" title="on the Pareto front">★</span>' if s["setup"] in front else ""
        average = s.get("avg_concurrency")
        rows.append(card_row(head, [
            f'<td class="name" title="{escape(s["setup"])}">{escape(s["label"])}{star}</td>',
            figure(key + "cost_per_solved_usd", per_solved,
                   span(s["cost_per_solved_low_usd"], s["cost_per_solved_high_usd"], usd),
                   "unknown" if per_solved == "unknown" else "money"),
            figure(key + "total_cost_usd", usd(s["total_cost_usd"]), cls="unknown" if s["total_cost_usd"] is None else ""),
            figure(key + "avg_cost_per_attempt_usd", per_attempt, cls="unknown" if per_attempt == "unknown" else ""),
            figure(key + "cost_per_passing_attempt_usd", per_pass, cls="unknown" if per_pass == "unknown" else ""),
            figure(key + "solved_tasks", f"{s['solved_tasks']} / {s['tasks']}"),
            *(not_flagged_cells(s, key) if analysed else []),
            figure(key + "solved_rate", percent(s["solved_rate"]), span(s["solved_rate_low"], s["solved_rate_high"], percent)),
            figure(key + "pass_at_1", percent(s["pass_at_1"]), span(s["pass_at_1_low"], s["pass_at_1_high"], percent)),
            figure(key + "attempts", f"{s['attempts']} (k={s['k']})"),
            figure(key + "errors", str(s["errors"]), cls="warn" if s["errors"] else ""),
            figure(key + "concurrency", f"{s.get('peak_concurrency') or 0} / {'-' if average is None else f'{average:.1f}'}"),
            figure(key + "tokens_per_solved", f"{count(s['tokens_in_per_solved'])} / {count(s['tokens_out_per_solved'])}"),
            f'<td class="basis">{escape(s["cost_basis"] or "-")}</td>',
        ]))
    return html_table("table-setups", head, rows, "setups cards")


def not_flagged_cells(s: dict[str, Any], key: str) -> list[str]:
    """Solved and $ per solved task with every flagged pass failed; "not analysed" for a setup analyze never read."""
    if not s.get("analysed"):
        return [figure(key + "solved_not_flagged", "not analysed"), figure(key + "cost_per_solved_not_flagged_usd", "-")]
    per_solved = no_ratio(s, s["cost_per_solved_not_flagged_usd"], "solved_tasks_not_flagged", "n/a: none solved")
    return [figure(key + "solved_not_flagged", f"{s['solved_tasks_not_flagged']} / {s['tasks']}"),
            figure(key + "cost_per_solved_not_flagged_usd", per_solved or usd(s["cost_per_solved_not_flagged_usd"]))]


def card_row(head: list[str], cells: list[str]) -> str:
    """A table row whose cells carry their column's name (data-label), which a narrow window shows beside each
    figure when the table turns into cards (page.STYLE)."""
    assert len(head) == len(cells), "one header per cell"
    labelled = [f'<td data-label="{escape(plain(name))}"{cell[3:]}' for name, cell in zip(head, cells)]
    return "<tr>" + "".join(labelled) + "</tr>"


def plain(header: str) -> str:
    """A header's text without its markup: "pass@1<br><small>a · b</small>" -> "pass@1 (a · b)"."""
    text = re.sub(r"<br><small>(.*?)</small>", r" (\1)", header)
    return unescape(re.sub(r"<[^>]+>", "", text))


def share(part: Any, whole: Any) -> str:
    return "-" if part is None or whole in (None, 0) or float(whole) == 0 else f"{100 * float(part) / float(whole):.0f} %"


def costs_table(setups: list[dict[str, Any]]) -> str:
    """Split against sole cost, generation against session time, tokens: where money and time went."""
    retries = any("retry_cost_usd" in s for s in setups)
    reported = any(s.get("reported_cost_usd") is not None for s in setups)  # the harness's own figure
    rows = []
    for s in setups:
        key = f"setup:{s['setup']}:"
        cells = [f'<td class="name" title="{escape(s["setup"])}">{escape(s["label"])}</td>',
                 figure(key + "split_cost_usd", usd(s["total_cost_usd"])),
                 figure(key + "sole_cost_usd", usd(s.get("sole_cost_usd"))),
                 figure(key + "split_of_sole", share(s["total_cost_usd"], s.get("sole_cost_usd")))]
        if retries:
            cells.append(figure(key + "retry_cost_usd", usd(s.get("retry_cost_usd"))))
        if reported:
            gap = s.get("cost_difference_pct")
            cells.append(figure(key + "reported_cost_usd", "-" if s.get("reported_cost_usd") is None else usd(s["reported_cost_usd"]),
                                "" if gap is None else f'<span class="ci">{gap:+.1f} % from ours</span>', "warn" if gap else ""))
        cells += [figure(key + "generation_s", hours(s["generation_s"])), figure(key + "session_s", hours(s["session_s"])),
                  figure(key + "generation_of_session", share(s["generation_s"], s["session_s"])),
                  figure(key + "steps", f"{s['steps']:,}"), figure(key + "tokens_in", count(s["tokens_in"])),
                  figure(key + "tokens_out", count(s["tokens_out"])), figure(key + "tokens_cached", count(s["tokens_cached"]))]
        rows.append(cells)
    head = ["setup", "cost<br><small>split by concurrency</small>", "cost alone<br><small>on the endpoint</small>",
            "split / alone", *(["of which retried tries"] if retries else []),
            *(["harness's own figure<br><small>and its gap when over 1 %</small>"] if reported else []),
            "generation<br><small>in model calls</small>",
            "agent session", "generation / session", "model calls", "tokens in", "tokens out", "tokens cached"]
    return html_table("table-costs", head, [card_row(head, cells) for cells in rows], "cards")


def pairs_table(pairs: list[dict[str, Any]], labels: dict[str, str]) -> str:
    rows = []
    for p in pairs:
        key = f"pair:{p['a']}:{p['b']}:"
        cells = [f'<td class="name">{escape(labels[p["a"]])}</td>', f'<td class="name">{escape(labels[p["b"]])}</td>',
                 f"<td>{p['tasks']}</td>"]
        for field, shown in (("cost_per_solved_usd", signed_usd), ("solved_rate", points), ("pass_at_1", points)):
            d = p[field]
            verdict = {True: "differs", False: "same", None: ""}[d["differs"]]
            cells.append(figure(key + field, "unknown" if d["diff"] is None else shown(d["diff"]),
                                span(d["low"], d["high"], shown), verdict))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = ["a", "b", "tasks", "Δ $ per solved task<br><small>a − b, 95 % interval</small>",
            "Δ solved rate<br><small>a − b in points, 95 % interval</small>",
            "Δ pass@1<br><small>a − b in points, 95 % interval</small>"]
    return html_table("table-pairs", head, rows, "pairs")


def cell_colour(passed: int, graded: int) -> str:
    if not graded:
        return "background:#e6e6e6"
    return f"background:hsl({round(120 * passed / graded)},65%,84%)"


def task_grid(tasks: list[dict[str, Any]], order: list[str], setups: list[dict[str, Any]]) -> str:
    """Task x setup: passed / graded attempts and what the task's attempts cost, hardest tasks first."""
    cells = {(t["task_id"], t["setup"]): t for t in tasks}
    rows = []
    for task_id in order:
        row = [f'<td class="name">{escape(task_id)}</td>']
        for s in setups:
            c = cells.get((task_id, s["setup"]))
            if c is None:
                row.append('<td class="none">not run</td>')
                continue
            verdict = f"{c['passed']}/{c['graded']}" + (f" +{c['attempts'] - c['graded']} err" if c["attempts"] > c["graded"] else "")
            row.append(f'<td data-figure="task:{escape(task_id)}:{escape(s["setup"])}" style="{cell_colour(c["passed"], c["graded"])}">'
                       f'<span class="v">{escape(verdict)} · {escape(usd(c["cost_usd"]))}</span></td>')
        rows.append("<tr>" + "".join(row) + "</tr>")
    head = ["task", *[escape(s["label"]) for s in setups]]
    return html_table("table-tasks", head, rows, "grid")


def moment(value: Any) -> str:
    """Epoch seconds or ISO text as UTC to the minute."""
    try:
        when = (datetime.fromtimestamp(value, timezone.utc) if isinstance(value, (int, float))
                else datetime.fromisoformat(str(value)).astimezone(timezone.utc))
    except (ValueError, OverflowError, OSError):
        return str(value)
    return when.strftime("%Y-%m-%d %H:%M UTC")


def bill_value(column: str, value: Any) -> str:
    if value is None:
        return "-"
    if column in ("start", "end", "interval_start", "interval_end", "hour"):
        return moment(value)
    if column.endswith("_usd") or column == "cost":
        return usd(value)
    if column.endswith("_s") and isinstance(value, (int, float)):
        return f"{value:,.0f} s"
    return str(value)


def bill_table(intervals: list[dict[str, Any]], group: int = 0) -> str:
    """A bill's intervals with whatever the bill step records for each (covered seconds, attributed...)."""
    columns = [c for c in dict.fromkeys(k for row in intervals for k in row) if not isinstance(intervals[0].get(c), (dict, list))]
    rows = ["<tr>" + "".join(figure(f"bill:{group}:{i}:{c}", bill_value(c, row.get(c))) for c in columns) + "</tr>"
            for i, row in enumerate(intervals)]
    return html_table(f"table-bill-{group}", [escape(c.replace("_", " ")) for c in columns], rows, "bill")
