"""The report's charts, drawn with plotly (the `report` extra), made to answer "which setup solves
the most per dollar": tasks solved against cost per solved task (log cost, the Pareto front, 95 %
error bars), the rates per setup on fixed 0-100 % axes, and where the money and the time went.
Setups are named by their short label (model · tier · harness) in legends and on category axes,
never on points; colour is the model (a shade per tier), the marker the harness."""

from __future__ import annotations

import colorsys
import math
from typing import Any

CHART_IDS = ("chart-cost-vs-solved", "chart-rates", "chart-breakdown")
HUES = (0.58, 0.07, 0.36, 0.78, 0.0, 0.5, 0.13, 0.9)  # blue, orange, green, purple, red, teal, gold, pink
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "star", "hexagon", "cross", "x")
TIER_ORDER = ("none", "minimal", "low", "medium", "default", "high", "xhigh", "max")
FONT = {"family": "system-ui, sans-serif", "size": 13}


def import_plotly() -> Any:
    from agentcompass.core.errors import UserError

    try:
        import plotly.graph_objects as go
        import plotly.io
        from plotly.subplots import make_subplots
    except ImportError:
        from agentcompass.core.install import pip_install

        raise UserError(f"the report's charts need plotly: {pip_install('report')}") from None
    # Plotly's "auto" engine writes orjson's spelling of the charts' data when orjson happens to be
    # installed and the standard library's otherwise: pin one, so a page reads the same everywhere.
    plotly.io.json.config.default_engine = "json"
    return go, make_subplots


def number(value: Any) -> float | None:
    return None if value is None else float(value)


def tier_rank(tier: Any) -> tuple[int, str]:
    text = str(tier or "")
    return (TIER_ORDER.index(text) if text in TIER_ORDER else len(TIER_ORDER), text)


def styles(setups: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Per setup (colour, marker): a hue per model, darker for a higher tier; a marker per harness."""
    models = sorted({str(s["model"]) for s in setups})
    harnesses = sorted({str(s["harness"]) for s in setups})
    out = {}
    for s in setups:
        tiers = sorted({x["reasoning"] for x in setups if x["model"] == s["model"]}, key=tier_rank)
        # 0 lowest tier .. 1 highest; a model run at one tier gets the middle shade.
        place = tiers.index(s["reasoning"]) / (len(tiers) - 1) if len(tiers) > 1 else 0.5
        red, green, blue = colorsys.hls_to_rgb(HUES[models.index(str(s["model"])) % len(HUES)], 0.62 - 0.3 * place, 0.7)
        out[s["setup"]] = (f"rgb({round(red * 255)},{round(green * 255)},{round(blue * 255)})",
                           SYMBOLS[harnesses.index(str(s["harness"])) % len(SYMBOLS)])
    return out


def plotted(setups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The setups the cost chart can place: a known cost above $0 (a log axis has no 0), a task solved."""
    return [s for s in setups if s["cost_per_solved_usd"] is not None and float(s["cost_per_solved_usd"]) > 0
            and s["solved_rate"] is not None]


def pareto(setups: list[dict[str, Any]], among: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The setups no other beats on both: none solves as many for less, or more for as little. Among those the
    chart places, unless `among` says which (the page's answer counts a known $0 too)."""
    front: list[dict[str, Any]] = []
    for s in sorted(plotted(setups) if among is None else among, key=lambda s: (float(s["cost_per_solved_usd"]), -s["solved_rate"])):
        if not front or s["solved_rate"] > front[-1]["solved_rate"]:
            front.append(s)
    return front


def error(value: float | None, low: Any, high: Any, scale: float = 1.0, unbounded: float | None = None) -> tuple[float, float]:
    """(below, above) for an error bar; an open upper end reaches `unbounded`."""
    if value is None:
        return 0.0, 0.0
    top = number(high) if high is not None else unbounded
    return (value - number(low) * scale if low is not None else 0.0), (top * scale - value if top is not None else 0.0)


def coinciding(setups: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Groups of setups drawn on the same spot (cost within 0.5 %, solved rate within 0.1 point)."""
    spots: dict[tuple[float, float], list[dict[str, Any]]] = {}
    for s in plotted(setups):
        spots.setdefault((round(math.log10(float(s["cost_per_solved_usd"])) * 400), round(s["solved_rate"] * 1000)), []).append(s)
    return [group for group in spots.values() if len(group) > 1]


def log_range(values: list[float]) -> list[float]:
    """A log axis spanning at least one decade, so that a 14 % difference does not fill the width."""
    low, high = math.log10(min(values)), math.log10(max(values))
    middle, half = (low + high) / 2, max(0.5, (high - low) / 2 + 0.08)
    return [middle - half, middle + half]


def money_ticks(axis: list[float]) -> tuple[list[float], list[str]]:
    """1-2-5 ticks in dollars across a log axis given as [log10 low, log10 high]."""
    steps = (1, 2, 3, 5) if axis[1] - axis[0] < 1.5 else (1, 2, 5)
    values = [m * 10 ** e for e in range(math.floor(axis[0]), math.ceil(axis[1]) + 1) for m in steps
              if axis[0] <= math.log10(m * 10 ** e) <= axis[1]]
    return values, [f"${v:,.2f}".rstrip("0").rstrip(".") if v < 1 else f"${v:,.0f}" for v in values]


def cost_vs_solved(setups: list[dict[str, Any]], look: dict[str, tuple[str, str]]) -> Any:
    go, _ = import_plotly()
    figure = go.Figure()
    points = plotted(setups)
    spans = [v for s in points for v in (number(s["cost_per_solved_usd"]), number(s["cost_per_solved_low_usd"]),
                                           number(s["cost_per_solved_high_usd"])) if v]
    axis = log_range(spans) if spans else [-2, 1]
    # Setups on one spot are drawn as rings, largest first, so that each stays visible.
    size = {s["setup"]: 26 - 8 * i for group in coinciding(setups) for i, s in enumerate(group[:3])}
    # The legend lists a model's setups together, by tier, then harness: easy to find one in many.
    ranks = {s["setup"]: rank for rank, s in enumerate(sorted(points, key=lambda s: (
        str(s["model"]), tier_rank(s["reasoning"]), str(s["harness"]), s["label"])), start=1)}
    for s in points:
        cost, solved = float(s["cost_per_solved_usd"]), 100 * s["solved_rate"]
        left, right = error(cost, s["cost_per_solved_low_usd"], s["cost_per_solved_high_usd"], unbounded=10 ** axis[1])
        down, up = error(solved, s["solved_rate_low"], s["solved_rate_high"], scale=100)
        colour, symbol = look[s["setup"]]
        figure.add_trace(go.Scatter(
            x=[cost], y=[solved], name=s["label"], mode="markers", legendrank=ranks[s["setup"]], cliponaxis=False,
            marker={"color": colour, "symbol": symbol, "size": size.get(s["setup"], 14), "line": {"color": "white", "width": 1.5}},
            error_x={"type": "data", "symmetric": False, "array": [right], "arrayminus": [left], "color": colour, "thickness": 1.5},
            error_y={"type": "data", "symmetric": False, "array": [up], "arrayminus": [down], "color": colour, "thickness": 1.5},
            customdata=[[s["setup"], s["solved_tasks"], s["tasks"]]],
            hovertemplate="%{customdata[0]}<br>$%{x:.4f} per solved task<br>%{customdata[1]} of %{customdata[2]} "
                          "tasks solved (%{y:.1f} %)<extra></extra>"))
    front = pareto(setups)
    ticks = money_ticks(axis)
    if len(front) > 1:
        figure.add_trace(go.Scatter(
            x=[float(s["cost_per_solved_usd"]) for s in front], y=[100 * s["solved_rate"] for s in front],
            name="Pareto front", mode="lines", line={"color": "#888", "dash": "dash", "width": 1.5}, hoverinfo="skip",
            legendrank=len(points) + 1))
    figure.update_layout(
        template="plotly_white", font=FONT, height=max(520, 140 + 25 * len(points)), margin={"l": 70, "r": 20, "t": 20, "b": 60},
        legend={"title": {"text": "model · tier · harness"}, "itemclick": "toggleothers"},
        xaxis={"type": "log", "range": axis, "title": "cost per solved task (USD, log scale)",
               "tickvals": ticks[0], "ticktext": ticks[1]},
        yaxis={"range": [0, 100], "title": "tasks solved (%)", "ticksuffix": " %", "dtick": 20})
    return figure


def rates(setups: list[dict[str, Any]]) -> Any:
    go, _ = import_plotly()
    labels = [s["label"] for s in setups]
    figure = go.Figure()
    for field, name, colour in (("pass_at_1", "pass@1 (attempts)", "#4c78a8"), ("solved_rate", "solved (tasks)", "#59a14f")):
        values = [None if s[field] is None else 100 * s[field] for s in setups]
        bars = [error(v, s[f"{field}_low"], s[f"{field}_high"], scale=100) for v, s in zip(values, setups)]
        figure.add_trace(go.Bar(
            y=labels, x=values, name=name, orientation="h", marker_color=colour,
            error_x={"type": "data", "symmetric": False, "array": [b[1] for b in bars],
                     "arrayminus": [b[0] for b in bars], "color": "#333", "thickness": 1.2},
            hovertemplate="%{y}: %{x:.1f} %<extra>" + name + "</extra>"))
    figure.update_layout(
        template="plotly_white", font=FONT, barmode="group", height=110 + 56 * len(setups),
        margin={"l": 10, "r": 40, "t": 40, "b": 50},
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
        xaxis={"range": [0, 100], "title": "rate with 95 % interval (%)", "ticksuffix": " %", "dtick": 10,
               "ticklabeloverflow": "allow"},
        yaxis={"autorange": "reversed", "automargin": True})
    return figure


def breakdown(setups: list[dict[str, Any]]) -> Any:
    """Split cost against the cost alone on the endpoint; generation time against session time."""
    go, make_subplots = import_plotly()
    labels = [s["label"] for s in setups]
    figure = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04)
    for field, name, colour in (("total_cost_usd", "cost (split by concurrency)", "#4c78a8"),
                                ("sole_cost_usd", "cost alone on the endpoint", "#9ecae9")):
        figure.add_trace(go.Bar(y=labels, x=[number(s.get(field)) for s in setups], name=name, orientation="h",
                                marker_color=colour, hovertemplate="%{y}: $%{x:.4f}<extra>" + name + "</extra>"), row=1, col=1)
    for field, name, colour in (("generation_s", "generation (in model calls)", "#f58518"),
                                ("session_s", "agent session", "#ffbf79")):
        figure.add_trace(go.Bar(y=labels, x=[s[field] / 3600 for s in setups], name=name, orientation="h",
                                marker_color=colour, hovertemplate="%{y}: %{x:.2f} h<extra>" + name + "</extra>"), row=1, col=2)
    figure.update_layout(
        template="plotly_white", font=FONT, barmode="group", height=130 + 56 * len(setups),
        margin={"l": 10, "r": 20, "t": 40, "b": 50}, legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"})
    figure.update_xaxes(title_text="total cost (USD)", tickprefix="$", rangemode="tozero", row=1, col=1)
    figure.update_xaxes(title_text="time summed over attempts (hours)", rangemode="tozero", row=1, col=2)
    figure.update_yaxes(autorange="reversed", automargin=True, row=1, col=1)
    return figure


def chart_html(setups: list[dict[str, Any]]) -> list[str]:
    """Each chart as an HTML fragment, setups in the order given; the first carries plotly.js
    inline, so the page needs no network."""
    figures = [cost_vs_solved(setups, styles(setups)), rates(setups), breakdown(setups)]
    return [figure.to_html(full_html=False, include_plotlyjs=(index == 0), div_id=CHART_IDS[index],
                           config={"displaylogo": False, "responsive": True})
            for index, figure in enumerate(figures)]
