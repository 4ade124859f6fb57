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
  agentcompass report results/nightly --hourly-usd 50.7    # self-hosted endpoint at $50.70/h, split by concurrency
  agentcompass report results/nightly --bill bill.csv      # the real bill: rows of interval_start, cost
  agentcompass report results/nightly --bill modal         # Modal's hourly workspace billing report
  agentcompass report results/nightly --verify             # recompute every figure from the raw files
"""


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of US dollars, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def register(sub: Any) -> None:
    parser = sub.add_parser("report", help="cost per solved task: tables, charts (report.html) and --verify",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a run directory, a run name holding several (a sweep), or a results root")
    parser.add_argument("--out", type=Path, metavar="DIR", help="where the report goes (default: PATH/report)")
    parser.add_argument("--verify", action="store_true",
                        help="recompute every figure of the report in --out from the raw files; exit 1 naming each mismatch")
    parser.add_argument("--hourly-usd", type=non_negative_float, metavar="X",
                        help="self-hosted endpoints' hourly rate (default: the model preset's pricing.hourly_usd)")
    parser.add_argument("--bill", metavar="FILE|modal",
                        help="the self-hosted endpoint's real bill: a JSON/CSV file of (interval_start, cost) rows, "
                             "or 'modal' for Modal's workspace billing report of the run's window")
    parser.add_argument("--modal-app", action="append", default=[], metavar="NAME",
                        help="with --bill modal: the endpoint's Modal app (default: the preset's pricing.modal_app)")
    parser.add_argument("--open", action="store_true", help="open report.html in the browser")


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    from agentcompass.errors import UserError
    from agentcompass.report.build import build, write
    from agentcompass.report.load import load, unfinished_note

    if args.hourly_usd is not None and args.bill:
        raise UserError("--hourly-usd and --bill both price self-hosted endpoints; pass one")
    setups = load(args.paths)
    out = args.out or args.paths[0] / "report"
    for note in filter(None, map(unfinished_note, setups)):
        print(f"note: {note}", file=sys.stderr, flush=True)
    if args.verify:
        return verify(args, setups, out)
    report = build(setups, pricing_of(args, setups))
    page = write(report, out)
    print_table(report["setups"])
    for line in report["banners"]:
        print(f"note: {line}", flush=True)
    if page is None:
        print(f"report: {out} (summary.csv, per_trial.csv, task_difficulty.csv, report.json); report.html "
              f"needs plotly for its charts: pip install 'agentcompass[report]'", flush=True)
        if args.open:
            print("--open: no report.html to open without plotly", file=sys.stderr)
        return 0
    print(f"report: {page}", flush=True)
    if args.open:
        import webbrowser

        if not webbrowser.open(page.resolve().as_uri()):  # the user's BROWSER, else the desktop's default
            print(f"--open: found no browser to open it; open {page} yourself, or set BROWSER", file=sys.stderr)
    return 0


def pricing_of(args: argparse.Namespace, setups: list[Any], recorded: dict[str, Any] | None = None) -> Any:
    """What prices self-hosted time: the flags, else (when verifying) what the report recorded."""
    from agentcompass.report.bill import buckets_of, modal_bill, read_bill
    from agentcompass.report.build import Pricing

    if args.bill == "modal":
        start, end, apps, tags = modal_window(args, setups)
        buckets, rows = modal_bill(start, end, apps, tags)
        return Pricing(bill_source="modal", bill=buckets, bill_rows=rows)
    if args.bill:
        return Pricing(bill_source=args.bill, bill=read_bill(Path(args.bill)))
    if args.hourly_usd is not None or recorded is None:
        return Pricing(hourly_usd=args.hourly_usd)
    billing = recorded.get("billing")
    if billing is not None:
        return Pricing(bill_source=billing["source"], bill=buckets_of(
            [{"interval_start": b["start"], "interval_end": b["end"], "cost": b["cost_usd"]} for b in billing["buckets"]]),
            bill_rows=billing.get("rows"))
    return Pricing(hourly_usd=recorded["pricing"].get("hourly_usd"))


def modal_window(args: argparse.Namespace, setups: list[Any]) -> tuple[float, float, list[str], dict[str, str]]:
    """The self-hosted trials' time span, and the endpoint's app names and tags from the flags or presets."""
    from agentcompass.errors import UserError
    from agentcompass.report.bill import seconds

    hosted_here = [s for s in setups if s.self_hosted]
    trials = [t.result for s in hosted_here for t in s.trials]
    if not trials:
        raise UserError("--bill modal: no self-hosted setup among the results (none has pricing.hourly_usd or its own base_url)")
    apps = list(args.modal_app) or sorted({(s.model.get("pricing") or {}).get("modal_app") for s in hosted_here} - {None})
    tags: dict[str, str] = {}
    for s in hosted_here:
        tags.update((s.model.get("pricing") or {}).get("modal_tags") or {})
    if not apps and not tags:
        raise UserError("--bill modal: which Modal app is the endpoint? pass --modal-app NAME, or set "
                        "pricing.modal_app (or pricing.modal_tags) in the model preset")
    return min(seconds(t.started_at) for t in trials), max(seconds(t.finished_at) for t in trials), apps, tags


def verify(args: argparse.Namespace, setups: list[Any], out: Path) -> int:
    from agentcompass.errors import UserError
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
    mismatches = check(setups, pricing_of(args, setups, recorded), out)
    for mismatch in mismatches:
        print(f"mismatch: {mismatch}", file=sys.stderr)
    print(f"verify: {len(mismatches)} mismatch(es) in {out}" if mismatches else f"verify: every figure in {out} recomputes")
    return 1 if mismatches else 0


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

    table = [("SETUP", "PASS@1", "OVER", "PASS@K", "SOLVED", "INCOMPLETE", "COST", "COST/SOLVED")]
    table += [(s["setup"], rate(s["pass_at_1"]), f"{s['pass_at_1_tasks']}/{s['tasks']}", rate(s["pass_at_k"]),
               f"{s['solved_tasks']}/{s['tasks']}", str(s["incomplete"] + s["not_run"]),
               usd(s["total_cost_usd"]), "n/a" if not s["solved_tasks"] else usd(s["cost_per_solved_usd"])) for s in setups]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
