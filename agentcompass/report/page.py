"""report.html: one self-contained page (plotly.js inline, no network), the charts, then the tables."""

from __future__ import annotations

from html import escape
from typing import Any

from agentcompass.report.charts import chart_html

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.unknown{color:#a33;font-style:italic}
.note{color:#555;font-size:13px}.wide{overflow-x:auto}"""


def cell(value: Any, column: str) -> str:
    if value is None and "cost" in column:
        return '<td class="unknown">unknown</td>'
    return f"<td>{escape('-' if value is None else str(value))}</td>"


# A ratio with nothing to divide by is not an unknown cost: say so instead.
NOT_APPLICABLE = {"cost_per_solved_usd": ("solved_tasks", "n/a: none solved"),
                  "cost_per_passing_attempt_usd": ("passed", "n/a: none passed"),
                  "avg_cost_per_attempt_usd": ("attempts", "n/a: no attempt")}


def shown(row: dict[str, Any], column: str) -> Any:
    count_column, text = NOT_APPLICABLE.get(column, (None, None))
    if count_column and row.get(column) is None and row.get(count_column) == 0:
        return text
    return row.get(column)


def table(rows: list[dict[str, Any]], table_id: str, columns: list[str] | None = None) -> str:
    columns = columns or (list(rows[0]) if rows else [])
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(cell(shown(row, c), c) for c in columns) + "</tr>" for row in rows)
    return f'<div class="wide"><table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def render(report: dict[str, Any], setup_columns: list[str]) -> str:
    setups, difficulty = report["setups"], report["task_difficulty"]
    charts = "\n".join(f"<section>{fragment}</section>" for fragment in chart_html(setups, difficulty))
    pricing = report["pricing"]
    notes = [f"Costs: {escape(pricing['description'])}."]
    if report.get("billing"):
        b = report["billing"]
        notes.append(f"Bill total ${escape(b['billed_usd'])}: ${escape(b['split_usd'])} split among trials, "
                     f"${escape(b['unattributed_usd'])} in buckets with no generation; "
                     f"{b['uncovered_s']} s of generation outside the bill.")
    notes.append("A cost shown as <i>unknown</i> could not be known (no price, no rate, no call records); it is never 0.")
    difficulty_columns = ["task_id", *[s["setup"] for s in setups], "overall"]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>agentcompass report</title><style>{STYLE}</style></head>
<body>
<h1>agentcompass report</h1>
{"".join(f'<p class="banner"><b>{escape(line)}</b></p>' for line in report.get("banners", []))}
<p class="note">{' '.join(notes)} Generated {escape(report['generated_at'])} from {len(report['inputs'])} results directory(ies).</p>
{charts}
<h2>Per setup</h2>
{table(setups, "table-setups", setup_columns)}
<h2>Task difficulty (pass rate per setup)</h2>
{table(difficulty, "table-difficulty", difficulty_columns)}
</body></html>
"""
