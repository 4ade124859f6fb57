"""`agentcompass report PATH...`: cost per solved task, per setup and per task, with charts in one
self-contained HTML page; `--verify` recomputes every figure from the raw files."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

STALE_SLACK_S = 0.01  # generated_at is to the millisecond
EXAMPLES = """examples:
  agentcompass report results/nightly                      # a run name: every setup of the sweep
  agentcompass report results/nightly --hourly-usd 50.7    # the self-hosted endpoint at $50.70/h, split by concurrency
  agentcompass report results/nightly --bill bill.csv      # its real bill: rows of interval_start (with offset), cost
  agentcompass report results/nightly --bill modal         # Modal's hourly workspace billing report
  agentcompass report results/nightly --bill 'openai/glm@http://gpu-a/v1=a.csv' --hourly-usd 'openai/kimi=40'
                                                           # two endpoints, each priced on its own
  agentcompass report results/nightly --verify             # recompute every figure from the raw files
  agentcompass report results/deepswe33 --bill STUDY/billing.json --against STUDY/summary.csv
                                                           # an imported study against its published figures
"""


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of US dollars, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def rate_flag(text: str) -> tuple[str | None, float]:
    """`X` or `ENDPOINT=X`."""
    name, _, value = text.rpartition("=")
    return (name or None), non_negative_float(value)


def register(sub: Any) -> None:
    parser = sub.add_parser("report", help="cost per solved task: tables, charts (report.html) and --verify",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a run directory, a run name holding several (a sweep), or a results root")
    parser.add_argument("--out", type=Path, metavar="DIR", help="where the report goes (default: PATH/report)")
    parser.add_argument("--verify", action="store_true",
                        help="recompute every figure of the report in --out from the raw files; exit 1 naming each mismatch")
    parser.add_argument("--hourly-usd", type=rate_flag, action="append", default=[], metavar="[ENDPOINT=]X",
                        help="a self-hosted endpoint's hourly rate (default: its preset's pricing.hourly_usd); "
                             "ENDPOINT (model name, or name@base_url) is needed when the results use several")
    parser.add_argument("--bill", action="append", default=[], metavar="[ENDPOINT=]FILE|modal",
                        help="a self-hosted endpoint's real bill: a JSON/CSV file of (interval_start, cost) rows or the cost "
                             "benchmark's billing.json, "
                             "or 'modal' for Modal's workspace billing report of the run's window; billed over the "
                             "jobs' window only. Naming an ENDPOINT bills its setups by the hour whatever their preset says")
    parser.add_argument("--modal-app", action="append", default=[], metavar="NAME",
                        help="with --bill modal: the endpoint's Modal app (default: the preset's pricing.modal_app)")
    parser.add_argument("--against", type=Path, metavar="SUMMARY.csv",
                        help="a published summary (the cost benchmark's summary.csv): every figure compared with the "
                             "report's, each difference printed; exit 1 on any beyond rounding (also with --verify)")
    parser.add_argument("--open", action="store_true", help="open report.html in the browser")


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    import sys

    from agentcompass.report.build import CSV_FILES, build, write
    from agentcompass.report.load import load, unfinished_note

    setups = load(args.paths)
    out = args.out or args.paths[0] / "report"
    if args.against is not None:
        from agentcompass.report.against import read_published

        read_published(args.against)  # a bad file is one line before anything is written
    for note in filter(None, map(unfinished_note, setups)):
        print(f"note: {note}", file=sys.stderr, flush=True)
    if args.verify:
        return verify(args, setups, out)
    report = build(setups, pricing_of(args, setups))
    for warning in coverage_warnings(report):
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    page = write(report, out)
    print_table(report["setups"])
    print_regrades(report["regrades"])
    for line in report["banners"]:
        print(f"note: {line}", flush=True)
    if args.against is not None and against(args.against, report["setups"]):
        print(f"report: {page or out}", flush=True)
        return 1
    if page is None:
        from agentcompass.core.install import pip_install

        print(f"report: {out} ({', '.join(CSV_FILES)}, report.json); report.html "
              f"needs plotly for its charts: {pip_install('report')}", flush=True)
        if args.open:
            print("--open: no report.html to open without plotly", file=sys.stderr)
        return 0
    print(f"report: {page}", flush=True)
    if args.open:
        import webbrowser

        if not webbrowser.open(page.resolve().as_uri()):  # the user's BROWSER, else the desktop's default
            print(f"--open: found no browser to open it; open {page} yourself, or set BROWSER", file=sys.stderr)
    return 0


def coverage_warnings(report: dict[str, Any]) -> list[str]:
    """Generation no bill interval covers: the setups it belongs to have an unknown cost."""
    groups = (report.get("billing") or {}).get("groups") or []
    return [f"{g['endpoint']}: {g['uncovered_s']:.3f} s of generation fall outside every interval of the bill "
            f"({g['source']}); the cost of {', '.join(g['uncovered_setups'])} is unknown: pass a bill that covers the run"
            for g in groups if g["uncovered_s"] > 0]


def endpoint_of(name: str | None, flag: str, setups: list[Any]) -> str:
    """The bill group a flag names: `model@base_url`, or a model name that only one endpoint serves;
    no name: the one self-hosted endpoint of the results."""
    from agentcompass.core.errors import UserError

    if name is None:
        groups = sorted({s.endpoint for s in setups if s.self_hosted})
        if len(groups) == 1:
            return groups[0]
        if not groups:
            raise UserError(f"{flag}: no self-hosted setup among the results (none has pricing.billing: self_hosted or "
                            f"pricing.hourly_usd); name the endpoint to bill it by the hour: {flag} MODEL=...")
        raise UserError(f"{flag}: the results use {len(groups)} self-hosted endpoints ({', '.join(groups)}); "
                        f"name one: {flag} ENDPOINT=...")
    matches = sorted({s.endpoint for s in setups if name in (s.endpoint, s.model.get("name"))})
    if len(matches) != 1:
        known = ", ".join(sorted({s.endpoint for s in setups})) or "none"
        why = "matches no setup's endpoint" if not matches else f"is served by {len(matches)} endpoints"
        raise UserError(f"{flag} {name}=...: {why}; endpoints (model@base_url) here: {known}")
    for setup in setups:
        if setup.endpoint == matches[0]:
            setup.billed_by_endpoint = True
    return matches[0]


def bill_flag(text: str, setups: list[Any]) -> tuple[str, str]:
    """`FILE`, `modal` or `ENDPOINT=FILE|modal`; a file whose own name holds `=` still reads as a file."""
    name, _, value = text.rpartition("=")
    if name and (Path(text).exists() or not any(name in (s.endpoint, s.model.get("name")) for s in setups)):
        name, value = "", text
    return endpoint_of(name or None, "--bill", setups), value


def pricing_of(args: argparse.Namespace, setups: list[Any], recorded: dict[str, Any] | None = None) -> Any:
    """What prices each self-hosted endpoint: the flags, else (when verifying) what the report recorded."""
    from agentcompass.core.errors import UserError
    from agentcompass.report.bill import modal_bill, read_bill
    from agentcompass.report.build import Pricing
    from agentcompass.report.costs import EndpointPricing

    if recorded is not None and not args.bill and not args.hourly_usd:
        return recorded_pricing(recorded, setups)
    endpoints: dict[str, EndpointPricing] = {}
    for text in args.bill:
        endpoint, source = bill_flag(text, setups)
        if endpoint in endpoints:
            raise UserError(f"--bill: {endpoint} is given two bills; pass one per endpoint")
        if source == "modal":
            start, end, apps, tags = modal_window(args, [s for s in setups if s.endpoint == endpoint])
            buckets, rows = modal_bill(start, end, apps, tags)
            endpoints[endpoint] = EndpointPricing(source="modal", bill=buckets, rows=rows)
        else:
            endpoints[endpoint] = EndpointPricing(source=source, bill=read_bill(Path(source)))
    for name, rate in args.hourly_usd:
        endpoint = endpoint_of(name, "--hourly-usd", setups)
        if endpoint in endpoints:
            raise UserError(f"--hourly-usd and --bill both price {endpoint}; pass one of them for it")
        endpoints[endpoint] = EndpointPricing(hourly_usd=rate)
    return Pricing(endpoints)


def recorded_pricing(recorded: dict[str, Any], setups: list[Any]) -> Any:
    """The rates and bills a report was made with, from its report.json and billing.json."""
    from agentcompass.report.bill import buckets_of
    from agentcompass.report.build import Pricing
    from agentcompass.report.costs import EndpointPricing

    bills = {g["endpoint"]: g for g in (recorded.get("billing") or {}).get("groups") or []}
    endpoints = {}
    for group in (recorded.get("pricing") or {}).get("groups") or []:
        for setup in setups:
            if setup.endpoint == group["endpoint"]:
                setup.billed_by_endpoint = True
        bill = bills.get(group["endpoint"])
        if bill is not None:
            endpoints[group["endpoint"]] = EndpointPricing(source=bill["source"], rows=bill.get("rows"), bill=buckets_of(
                [{"interval_start": i["start"], "interval_end": i["end"], "cost": i["cost_usd"]} for i in bill["intervals"]]))
        elif group.get("hourly_usd") is not None:
            endpoints[group["endpoint"]] = EndpointPricing(hourly_usd=group["hourly_usd"])
    return Pricing(endpoints)


def modal_window(args: argparse.Namespace, setups: list[Any]) -> tuple[float, float, list[str], dict[str, str]]:
    """The endpoint's trials' time span, and its app names and tags from the flags or presets."""
    from agentcompass.core.errors import UserError
    from agentcompass.report.bill import seconds

    trials = [t.result for s in setups for t in s.trials]
    if not trials:
        raise UserError("--bill modal: the endpoint's setups hold no trials")
    apps = list(args.modal_app) or sorted({(s.model.get("pricing") or {}).get("modal_app") for s in setups} - {None})
    tags: dict[str, str] = {}
    for s in setups:
        tags.update((s.model.get("pricing") or {}).get("modal_tags") or {})
    if not apps and not tags:
        raise UserError("--bill modal: which Modal app is the endpoint? pass --modal-app NAME, or set "
                        "pricing.modal_app (or pricing.modal_tags) in the model preset")
    return min(seconds(t.started_at) for t in trials), max(seconds(t.finished_at) for t in trials), apps, tags


def verify(args: argparse.Namespace, setups: list[Any], out: Path) -> int:
    from agentcompass.core.errors import UserError
    from agentcompass.report.verify import verify as check

    try:
        recorded = json.loads((out / "report.json").read_text(encoding="utf-8"))
        if (out / "billing.json").is_file():
            recorded["billing"] = json.loads((out / "billing.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"--verify: no readable report in {out} ({type(exc).__name__}); "
                        f"make one first: agentcompass report {' '.join(map(str, args.paths))}") from None
    remake = f"agentcompass report {' '.join(map(str, args.paths))}" + (f" --out {args.out}" if args.out else "")
    running = [s.name for s in setups if s.status == "running"]
    if running:
        print(f"verify: {', '.join(running)} still running: its figures change with every trial; verify once it "
              f"ends, after {remake}", flush=True)
        return 1
    stale = newer_than_report(setups, recorded)
    if stale:
        print(f"verify: the report in {out} (made {recorded.get('generated_at')}) is older than {stale}: "
              f"regenerate it with {remake}, then verify", flush=True)
        return 1
    from agentcompass.core.registry import installed

    page = installed("plotly")
    if not page:  # as `report` wrote none: the CSVs and JSON still carry every figure
        from agentcompass.core.install import pip_install

        print(f"verify: report.html not checked: its charts need plotly, not installed here ({pip_install('report')})",
              flush=True)
    mismatches = check(setups, pricing_of(args, setups, recorded), out, page)
    for mismatch in mismatches:
        print(f"mismatch: {mismatch}", file=sys.stderr)
    print(f"verify: {len(mismatches)} mismatch(es) in {out}" if mismatches else f"verify: every figure in {out} recomputes")
    differs = args.against is not None and against(args.against, recorded.get("setups") or [])
    return 1 if mismatches or differs else 0


def against(path: Path, rows: list[dict[str, Any]]) -> bool:
    """Print each figure that differs from the published summary; True when any does."""
    from agentcompass.report.against import compare

    differences = compare(rows, path)
    for line in differences:
        print(f"differs: {line}", file=sys.stderr)
    print(f"against {path}: {len(differences)} figure(s) differ beyond rounding" if differences
          else f"against {path}: every published figure agrees (to the cent)", flush=True)
    return bool(differences)


def newer_than_report(setups: list[Any], recorded: dict[str, Any]) -> str | None:
    """The first run that ended after the report was made ("SETUP, which ended at T"), else None. Its
    run.json says when (a resume rewrites it); a file's mtime would not do: a hand-edited trials.jsonl is
    what --verify must catch, not call stale."""
    from agentcompass.report.bill import seconds

    try:
        made = seconds(recorded["generated_at"])
    except (KeyError, TypeError, ValueError):
        return None
    for setup in setups:
        try:
            info = json.loads((setup.dir / "run.json").read_text(encoding="utf-8"))
            ended = info.get("finished_at") or max(s.get("ended_at") or "" for s in info.get("sessions") or [{}])
            if ended and seconds(ended) > made + STALE_SLACK_S:
                return f"the run of {setup.name}, which ended at {ended}"
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return None


def print_table(setups: list[dict[str, Any]]) -> None:
    def usd(value: str | None) -> str:
        return "unknown" if value is None else f"${float(value):.4f}"

    def rate(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    table = [("SETUP", "PASS@1", "OVER", "PASS@K", "PASS^K", "SOLVED", "INCOMPLETE", "COST", "COST/SOLVED")]
    table += [(s["setup"], rate(s["pass_at_1"]), f"{s['pass_at_1_tasks']}/{s['tasks']}", rate(s["pass_at_k"]),
               rate(s.get("pass_hat_k")),
               f"{s['solved_tasks']}/{s['tasks']}", str(s["incomplete"] + s["not_run"]),
               usd(s["total_cost_usd"]), "n/a" if not s["solved_tasks"] else usd(s["cost_per_solved_usd"])) for s in setups]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())


def print_regrades(pairs: list[dict[str, Any]]) -> None:
    """A regraded run beside its original: how many verdicts flipped, and each one (report/regraded.py)."""
    from agentcompass.report.regraded import pair_lines

    for line in pair_lines(pairs):
        print(line, flush=True)
