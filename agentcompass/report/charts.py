"""The report's three charts, drawn with plotly (the `report` extra): success against cost per
solved task, cost and success bars per setup, and the task x setup pass-rate heatmap."""

from __future__ import annotations

from typing import Any

CHART_IDS = ("chart-success-vs-cost", "chart-cost-and-success", "chart-task-heatmap")


def import_plotly() -> Any:
    from agentcompass.errors import UserError

    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:
        raise UserError("the report's charts need plotly: pip install 'agentcompass[report]'") from None
    return go, make_subplots


def figures(setups: list[dict[str, Any]], difficulty: list[dict[str, Any]]) -> list[Any]:
    go, make_subplots = import_plotly()
    names = [s["setup"] for s in setups]
    priced = [s for s in setups if s["cost_per_solved_usd"] is not None and s["pass_at_1"] is not None]
    scatter = go.Figure(go.Scatter(
        x=[float(s["cost_per_solved_usd"]) for s in priced], y=[s["pass_at_1"] for s in priced],
        text=[s["setup"] for s in priced], mode="markers+text", textposition="top center", marker={"size": 12}))
    unpriced = len(setups) - len(priced)
    note = f" ({unpriced} setup(s) without a known cost per solved task left out)" if unpriced else ""
    scatter.update_layout(title=f"Success rate against cost per solved task{note}",
                          xaxis_title="cost per solved task (USD)", yaxis_title="pass@1", yaxis_range=[0, 1.15])
    bars = make_subplots(rows=1, cols=2, subplot_titles=("total cost (USD; unknown left blank)", "pass@1 and solved rate"))
    bars.add_trace(go.Bar(x=names, y=[None if s["total_cost_usd"] is None else float(s["total_cost_usd"]) for s in setups],
                          name="total cost"), row=1, col=1)
    bars.add_trace(go.Bar(x=names, y=[s["pass_at_1"] for s in setups], name="pass@1"), row=1, col=2)
    bars.add_trace(go.Bar(x=names, y=[s["solved_rate"] for s in setups], name="solved rate"), row=1, col=2)
    bars.update_layout(title="Cost and success per setup", barmode="group")
    heatmap = go.Figure(go.Heatmap(
        z=[[row.get(name) for name in names] for row in difficulty], x=names, y=[row["task_id"] for row in difficulty],
        zmin=0, zmax=1, colorscale="RdYlGn", colorbar={"title": "pass rate"}))
    heatmap.update_layout(title="Pass rate per task and setup (hardest tasks first)",
                          height=max(350, 28 * len(difficulty) + 150), yaxis_autorange="reversed")
    return [scatter, bars, heatmap]


def chart_html(setups: list[dict[str, Any]], difficulty: list[dict[str, Any]]) -> list[str]:
    """Each chart as an HTML fragment; the first carries plotly.js inline, so the page needs no network."""
    return [figure.to_html(full_html=False, include_plotlyjs=(index == 0), div_id=CHART_IDS[index],
                           config={"displaylogo": False})
            for index, figure in enumerate(figures(setups, difficulty))]
