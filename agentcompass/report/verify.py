"""`--verify`: recompute every figure from the raw files and name each one the report disagrees with.

Two kinds of check: the report's files against a fresh computation from trials.jsonl,
model_calls.jsonl (every try's) and the bill; and the raw files against each other (each run's
summary.json, each trial's call records, timings and window, each hosted cost against tokens x
prices, each bill's coverage of the generation and its reconciliation). report.html is read back too:
every figure it prints (its cells marked data-figure) and every point of its charts."""

from __future__ import annotations

import csv
import json
import re
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from agentcompass.report.bill import seconds
from agentcompass.report.build import Pricing, build, file_texts, iso
from agentcompass.report.load import Setup, Trial

CSV_KEYS = {"summary.csv": ("setup",), "per_trial.csv": ("setup", "task_id", "attempt"), "task_difficulty.csv": ("task_id",),
            "per_task.csv": ("task_id", "setup"), "paired_differences.csv": ("a", "b")}
SUMMARY_FIELDS = ("tasks", "passed", "failed", "errors", "incomplete", "not_run", "complete", "scoring_rule", "pass_at_1",
                  "pass_at_1_tasks", "pass_at_k", "pass_at_k_tasks", "solved_tasks", "solved_rate", "tokens_in", "tokens_out",
                  "tokens_cached", "pass_hat_k")
BRIEF_CHARS = 60  # a value longer than this is cut in a mismatch line
TIME_SLACK_S = 0.01  # timings are rounded to 0.1 ms, call times to 1 µs


def verify(setups: list[Setup], pricing: Pricing, out: Path, page: bool = True) -> list[str]:
    """Every mismatch between the report in `out` and a fresh one; `page` False: report.html is not read back
    (without plotly `report` writes none, and none can be rendered here to compare)."""
    report = build(setups, pricing)
    mismatches: list[str] = []
    for name, text in file_texts(report).items():
        path = out / name
        if not path.is_file():
            mismatches.append(f"{name}: missing from {out}")
        elif name.endswith(".csv"):
            mismatches += compare_csv(name, text, path.read_text(encoding="utf-8"))
        else:
            found = json.loads(path.read_text(encoding="utf-8"))
            mismatches += compare_json(name, undated(json.loads(text)), undated(found))
    if page:
        mismatches += check_page(report, out / "report.html")
    return mismatches + check_summaries(setups, report) + check_trials(setups) + check_costs(report) + check_bill(report)


VOID_TAGS = {"br", "img", "hr", "wbr", "input", "meta", "link"}


class Figures(HTMLParser):
    """The text of every element marked data-figure, by its key."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: dict[str, str] = {}
        self.key: str | None = None
        self.depth = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.key is not None:
            self.depth += tag not in VOID_TAGS  # <br> has no end tag
        elif (key := dict(attrs).get("data-figure")) is not None:
            self.key, self.depth, self.parts = key, 1, []

    def handle_endtag(self, tag: str) -> None:
        if self.key is not None:
            self.depth -= 1
            if self.depth == 0:
                self.found[self.key] = " ".join(" ".join(self.parts).split())
                self.key = None

    def handle_data(self, data: str) -> None:
        if self.key is not None:
            self.parts.append(data)


CHART_CALL = re.compile(r'Plotly\.newPlot\(\s*"([^"]+)",\s*')
PLOTTED = ("name", "x", "y")


def charts(html: str) -> dict[str, list[dict[str, Any]]]:
    """Each chart's traces as plotted: name, x, y and the error bars."""
    out = {}
    decoder = json.JSONDecoder()
    for match in CHART_CALL.finditer(html):
        try:
            data, _ = decoder.raw_decode(html, match.end())
        except ValueError:
            data = None
        out[match.group(1)] = [{**{k: t.get(k) for k in PLOTTED},
                                **{f"{bar}.{side}": (t.get(bar) or {}).get(side) for bar in ("error_x", "error_y")
                                   for side in ("array", "arrayminus")}} for t in data or [] if isinstance(t, dict)]
    return out


def page_figures(html: str) -> tuple[dict[str, str], dict[str, list[dict[str, Any]]]]:
    parser = Figures()
    parser.feed(html)
    return parser.found, charts(html)


def check_page(report: dict[str, Any], path: Path) -> list[str]:
    """The numbers report.html prints and plots, read back out of the page, against a fresh rendering."""
    from agentcompass.report.page import render

    if not path.is_file():  # plotly is here (the caller checked), so `report` writes it
        return [f"report.html: missing from {path.parent} (rerun `agentcompass report` to write it)"]
    want_cells, want_charts = page_figures(render(report))
    have_cells, have_charts = page_figures(path.read_text(encoding="utf-8"))
    out = [differs(f"report.html: {key}", value, have_cells.get(key))
           for key, value in want_cells.items() if have_cells.get(key) != value]
    out += [f"report.html: {key} ({value!r}) should not be there" for key, value in have_cells.items() if key not in want_cells]
    for chart, traces in want_charts.items():
        found = have_charts.get(chart)
        if found is None or len(found) != len(traces):
            out.append(f"report.html: {chart} has {0 if found is None else len(found)} trace(s), recomputed {len(traces)}")
            continue
        for want, have in zip(traces, found):
            out += [differs(f"report.html: {chart}: {want['name']}: {field}", value, have[field])
                    for field, value in want.items() if have[field] != value]
    return out


def compare_csv(name: str, expected: str, found: str) -> list[str]:
    keys = CSV_KEYS[name]
    want = {tuple(r[k] for k in keys): r for r in csv.DictReader(expected.splitlines())}
    have = {tuple(r.get(k) for k in keys): r for r in csv.DictReader(found.splitlines())}
    out = [f"{name}: row {'/'.join(map(str, k))} is missing" for k in want if k not in have]
    out += [f"{name}: row {'/'.join(map(str, k))} should not be there" for k in have if k not in want]
    for key, row in want.items():
        for column, value in row.items():
            if key in have and have[key].get(column) != value:
                out.append(differs(f"{name}: {'/'.join(key)}: {column}", value, have[key].get(column)))
    return out


def compare_json(name: str, expected: Any, found: Any, where: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(found, dict):
        return [m for k in expected.keys() | found.keys()
                for m in compare_json(name, expected.get(k), found.get(k), f"{where}.{k}" if where else k)]
    if isinstance(expected, list) and isinstance(found, list) and len(expected) == len(found):
        return [m for i, (e, f) in enumerate(zip(expected, found)) for m in compare_json(name, e, f, f"{where}[{label(e, i)}]")]
    return [] if expected == found else [differs(f"{name}: {where}", expected, found)]


def differs(field: str, expected: Any, found: Any) -> str:
    """`FIELD: expected X, found Y` on one line, however long the values."""
    return f"{field}: expected {brief(expected)}, found {brief(found)}"


def brief(value: Any) -> str:
    """A value short enough for one line: itself, else a long list or dict by its length, else cut."""
    text = repr(value)
    if len(text) <= BRIEF_CHARS:
        return text
    if isinstance(value, (list, dict)):
        return f"a {type(value).__name__} of {len(value)}"
    return text[:BRIEF_CHARS - 3] + "..."


def undated(data: Any) -> Any:
    """The report without when it was made: the one figure a recomputation cannot repeat."""
    return {k: v for k, v in data.items() if k != "generated_at"} if isinstance(data, dict) else data


def label(item: Any, index: int) -> str:
    """Name a list item by what it is about (a setup, a trial, a task), else by its index."""
    if isinstance(item, dict):
        parts = [str(item[k]) for k in ("setup", "task_id", "attempt", "a", "b") if k in item]
        if parts:
            return "/".join(parts)
    return str(index)


def check_summaries(setups: list[Setup], report: dict[str, Any]) -> list[str]:
    """The report's figures against what each run wrote in its own summary.json."""
    out = []
    for setup, row in zip(setups, report["setups"]):
        path = setup.dir / "summary.json"
        if not path.is_file():
            continue
        summary = json.loads(path.read_text(encoding="utf-8"))
        for field in SUMMARY_FIELDS:
            if field in summary and summary[field] != row[field]:
                out.append(differs(f"{path}: {field} (recomputed from trials.jsonl)", row[field], summary[field]))
        if "model_calls" in summary and summary["model_calls"] != row["steps"]:
            out.append(differs(f"{path}: model_calls (recomputed)", row["steps"], summary["model_calls"]))
        if same_pricing_as_run(setup, report):
            out += check_cost(path, summary, row)
    return out


def same_pricing_as_run(setup: Setup, report: dict[str, Any]) -> bool:
    """Whether the report priced this setup as its run did: per token, or at its preset's own hourly rate. A
    report made with --hourly-usd or --bill prices the endpoint otherwise, and the run's figure cannot match."""
    if not setup.self_hosted:
        return True
    group = next((g for g in report["pricing"].get("groups", []) if setup.name in g["setups"]), None)
    return group is not None and not group["bill"] and group["hourly_usd"] == setup.hourly_usd


def check_cost(path: Path, summary: dict[str, Any], row: dict[str, Any]) -> list[str]:
    """The run's own cost against the report's, to the cent, where both price the same way (per token, or the
    same split); unknown on one side only is a mismatch too."""
    if "cost_usd" not in summary:
        return []
    mine, theirs = summary["cost_usd"], row["total_cost_usd"]
    if (mine is None) != (theirs is None):
        return [f"{path}: cost_usd is {mine!r}, the report's {theirs!r} (unknown on one side only)"]
    basis = summary.get("cost_basis")
    parts = (row["cost_basis"] or "").split(", ")
    comparable = basis is None and all(p == "" or p.startswith(("per-token", "no model calls", "none")) for p in parts)
    if mine is None or not (comparable or basis == row["cost_basis"]):
        return []
    if abs(Decimal(str(mine)) - Decimal(theirs)) >= Decimal("0.01"):
        return [f"{path}: cost_usd is {mine!r}, the report's {theirs!r}"]
    return []


def check_trials(setups: list[Setup]) -> list[str]:
    """Each trial's call records (every try's) against its usage, its times nested as they must be,
    and every call inside the trial's own start-finish window."""
    out = []
    for setup in setups:
        for trial in setup.trials:
            r, name = trial.result, f"{setup.name}/{trial.result.task_id}/attempt-{trial.result.attempt}"
            orchestration, session = r.timings.get("total", 0.0), r.timings.get("agent", 0.0)
            # The timings are the last try's; generation_s in trials.jsonl counts every try.
            last = (sum(float(c.get("duration_s") or 0) for c in trial.calls) if trial.calls is not None
                    else r.usage.generation_s if not trial.tries else None)
            if last is not None and not last <= session + TIME_SLACK_S <= orchestration + 2 * TIME_SLACK_S:
                out.append(f"{name}: times not nested: generation_s {round(last, 6)} (last try) <= session_s {session} "
                           f"<= orchestration_s {orchestration} fails")
            calls = trial.all_calls()
            if calls is None:
                continue
            answered = [c for c in calls if c.get("status") == "ok"]
            counted = {"model_calls": len(answered), **{f: sum(c.get(f) or 0 for c in answered)
                                                          for f in ("tokens_in", "tokens_out", "tokens_cached")}}
            for field, value in counted.items():
                if getattr(r.usage, field) != value:
                    out.append(f"{name}: {field} is {getattr(r.usage, field)} in trials.jsonl, {value} in model_calls.jsonl")
            waited = sum(float(c.get("duration_s") or 0) for c in calls)
            if abs(waited - r.usage.generation_s) > TIME_SLACK_S:
                out.append(f"{name}: generation_s is {r.usage.generation_s} in trials.jsonl, {waited:.6f} in model_calls.jsonl")
            out += calls_outside(name, trial, seconds(r.started_at), seconds(r.finished_at))
    return out


def calls_outside(name: str, trial: Trial, started: float, finished: float) -> list[str]:
    """A call recorded outside its trial's window would be priced against other trials' time. The
    window (started_at to finished_at) is the last try's; each failed try ran before the next one."""
    out = []
    later = started
    for label, calls in reversed([(t.label, t.calls) for t in trial.tries]):
        stray = [c for c in calls if float(c["end"]) > later + TIME_SLACK_S]
        if stray:
            out.append(f"{name}: {len(stray)} model call(s) of {label} end after the next try began ({iso(later)})")
        later = min([later] + [float(c["start"]) for c in calls])
    stray = [c for c in trial.calls or [] if float(c["start"]) < started - TIME_SLACK_S or float(c["end"]) > finished + TIME_SLACK_S]
    if stray:
        worst = max(max(started - float(c["start"]), float(c["end"]) - finished) for c in stray)
        out.append(f"{name}: {len(stray)} model call(s) outside the trial's window {iso(started)} to {iso(finished)} "
                   f"(up to {worst:.3f} s)")
    return out


def check_costs(report: dict[str, Any]) -> list[str]:
    """A hosted trial's cost as its harness wrote it against tokens x the model's prices: more than
    1 % apart, one of them is wrong (a stale price, cache writes not counted)."""
    out = []
    for row in report["trials"]:
        name = f"per_trial: {row['setup']}/{row['task_id']}/{row['attempt']}"
        if row.get("cost_difference_pct") is not None:
            out.append(f"{name}: trials.jsonl says ${row['reported_cost_usd']}, tokens x prices give ${row['cost_usd']} "
                       f"({row['cost_difference_pct']:+} %)")
        elif row["cost_usd"] is not None and Decimal(row["cost_usd"]) == 0 and Decimal(row.get("reported_cost_usd") or 0) > 0:
            out.append(f"{name}: trials.jsonl says ${row['reported_cost_usd']} for calls whose tokens cost nothing")
    return out


def check_bill(report: dict[str, Any]) -> list[str]:
    """Each bill covers the run's generation and its split reconciles to the cent; no trial's share exceeds its sole cost."""
    billing = report["billing"]
    out = []
    for group in (billing or {}).get("groups") or []:
        total = Decimal(group["split_usd"]) + Decimal(group["unattributed_usd"])
        if abs(total - Decimal(group["billed_usd"])) >= Decimal("0.01"):
            out.append(f"billing {group['endpoint']}: split {group['split_usd']} + unattributed {group['unattributed_usd']} "
                       f"!= billed {group['billed_usd']}")
        if group["uncovered_s"] > 0:
            out.append(f"billing {group['endpoint']}: {group['uncovered_s']} s of generation outside every interval of the "
                       f"bill; the cost of {', '.join(group['uncovered_setups'])} is unknown")
    for row in report["trials"]:
        if row["cost_usd"] is not None and row["sole_cost_usd"] is not None and Decimal(row["cost_usd"]) > Decimal(row["sole_cost_usd"]):
            out.append(f"per_trial: {row['setup']}/{row['task_id']}/{row['attempt']}: split {row['cost_usd']} exceeds sole {row['sole_cost_usd']}")
    return out
