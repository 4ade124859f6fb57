"""A self-hosted endpoint's bill as billing buckets: from a JSON/CSV file, or Modal's workspace
billing report for the run's window (hourly resolution, filtered to the endpoint's app or tags)."""

from __future__ import annotations

import csv
import json
import time
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable

from agentcompass.core.errors import UserError
from agentcompass.report.split import Bucket

HOUR_S = 3600.0
clock = time.time  # what "now" is for the Modal pull (tests of a run in the future set their own)
RESOLUTION_S = {"h": HOUR_S, "d": 24 * HOUR_S}
FILE_HINT = ("a bill is a .json list (or {\"buckets\": [...]}, or the cost benchmark's billing.json) or a .csv, each row with interval_start "
             "(ISO time with its UTC offset, or epoch seconds) and cost, optionally interval_end (default: one hour later)")


class NaiveTime(ValueError):
    """A bill time without a UTC offset: read as UTC it could shift the bill by hours, so it is refused."""


class MalformedBill(ValueError):
    """A bill whose shape is known but one field is wrong: the message names the field."""


def cost_bench_rows(bill: dict[str, Any]) -> list[dict[str, Any]]:
    """The Coding Agent Cost Benchmark's billing.json: `by_hour` rows of the endpoint app's whole cost for
    each hour (`hour_cost`). Its `billed` is that cost times the share of the hour the study's self-hosted
    jobs ran: the report makes that share itself (a bill is charged over the jobs' window only), so the
    hour's whole cost is the interval's cost; a file without hour_cost gives `billed` as a whole hour."""
    hours = bill["by_hour"]
    if not isinstance(hours, list):
        raise MalformedBill(f"by_hour is {type(hours).__name__}, not a list of {{hour, billed}} rows")
    rows = []
    for number, hour in enumerate(hours, 1):
        if not isinstance(hour, dict):
            raise MalformedBill(f"by_hour[{number - 1}] is {type(hour).__name__}, not an object with hour and billed")
        field_of_cost = "hour_cost" if "hour_cost" in hour else "billed"
        for field in ("hour", field_of_cost):
            if hour.get(field) in (None, ""):
                raise MalformedBill(f"by_hour[{number - 1}].{field} is missing; each row needs hour (ISO time with "
                                    "its offset) and hour_cost (USD)")
        try:
            cost = Decimal(str(hour[field_of_cost]))
            seconds(hour["hour"])
        except (InvalidOperation, ValueError) as exc:
            raise MalformedBill(f"by_hour[{number - 1}]: {exc if isinstance(exc, NaiveTime) else 'not a time or amount'} "
                                f"(hour {hour['hour']!r}, {field_of_cost} {hour[field_of_cost]!r})") from None
        if not cost.is_finite() or cost < 0:
            raise MalformedBill(f"by_hour[{number - 1}].{field_of_cost} is {hour[field_of_cost]!r}; expected an amount >= 0 in USD")
        rows.append({"interval_start": hour["hour"], "cost": cost})
    return rows


def key(name: str) -> str:
    """`Interval Start` (as `modal billing report --csv` writes it) and `interval_start` alike."""
    return name.strip().lower().replace(" ", "_")


def seconds(value: Any) -> float:
    """Epoch seconds from a number, or an ISO time that says its offset (a naive one raises NaiveTime)."""
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise NaiveTime(f"{text!r} has no UTC offset")
    return moment.timestamp()


def buckets_of(rows: Iterable[dict[str, Any]], default_length_s: float = HOUR_S) -> list[Bucket]:
    """Rows of (interval start, cost[, interval end]); rows of one interval (several objects) add up."""
    totals: dict[tuple[float, float], Decimal] = {}
    for number, row in enumerate(rows, 1):
        row = {key(k): v for k, v in row.items()}
        try:
            start = seconds(row["interval_start"])
            end = seconds(row["interval_end"]) if row.get("interval_end") not in (None, "") else start + default_length_s
        except NaiveTime as exc:
            raise NaiveTime(f"row {number}: interval time {exc}; write it with its offset "
                            "(2026-07-15T18:00:00+00:00 or ...Z) or as epoch seconds") from None
        if end <= start:
            raise ValueError(f"row {number}: interval_end is not after interval_start")
        totals[(start, end)] = totals.get((start, end), Decimal(0)) + Decimal(str(row["cost"]))
    buckets = [Bucket(start, end, cost) for (start, end), cost in sorted(totals.items())]
    for before, after in zip(buckets, buckets[1:]):
        if after.start < before.end:  # the same time billed twice would be charged twice
            raise ValueError(f"the intervals starting at {before.start:.0f} and {after.start:.0f} (epoch s) overlap")
    return buckets


def read_bill(path: Path) -> list[Bucket]:
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".csv":
            rows: Any = list(csv.DictReader(text.splitlines()))
        else:
            rows = json.loads(text)
            if isinstance(rows, dict) and "by_hour" in rows:
                rows = cost_bench_rows(rows)
            else:
                rows = rows.get("buckets") if isinstance(rows, dict) else rows
            if not isinstance(rows, list):
                raise MalformedBill("the file is neither a list of rows nor {\"buckets\": [...]} nor a billing.json "
                                    "with by_hour")
        buckets = buckets_of(rows)
    except OSError as exc:
        raise UserError(f"--bill {path}: cannot read it ({exc.strerror}); {FILE_HINT}") from None
    except (NaiveTime, MalformedBill) as exc:
        raise UserError(f"--bill {path}: {exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError, InvalidOperation) as exc:
        raise UserError(f"--bill {path}: not a bill ({type(exc).__name__}: {exc}); {FILE_HINT}") from None
    if not buckets:
        raise UserError(f"--bill {path}: holds no rows; {FILE_HINT}")
    return buckets


def utc(moment: datetime) -> datetime:
    """Modal's report states its intervals in UTC; an SDK that hands them back naive still means UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def modal_bill(start: float, end: float, app_names: list[str], tags: dict[str, str],
               token_id: str | None = None, token_secret: str | None = None,
               now: float | None = None) -> tuple[list[Bucket], list[dict[str, Any]]]:
    """Modal's hourly workspace billing report for [start, end), the rows of the endpoint's app
    (by name) or carrying the preset's tags; returns the buckets and the raw rows kept.

    The SDK reports complete intervals only (a partial last one is dropped), so the pull ends at the last
    hour that is over: an hour of the run still going on is not billed yet, and is flagged in the rows
    (`partial`) and on stderr rather than counted as $0."""
    import sys

    from agentcompass.providers.modal.provider import CREDENTIALS_HINT, import_modal, modal_credentials

    credentials = modal_credentials(token_id, token_secret)
    if credentials is None:
        raise UserError(f"--bill modal: {CREDENTIALS_HINT}")
    modal = import_modal(credentials)
    hour_start = start // HOUR_S * HOUR_S
    wanted_end = -(-end // HOUR_S) * HOUR_S  # the whole last hour of the run
    complete_end = (clock() if now is None else now) // HOUR_S * HOUR_S  # the last hour that is over
    pull_end = min(wanted_end, complete_end)
    if pull_end <= hour_start:
        raise UserError(f"--bill modal: no hour of the run is over yet (Modal bills whole hours); run the report after "
                        f"{datetime.fromtimestamp(hour_start + HOUR_S, timezone.utc):%H:%M} UTC")
    try:
        client = modal.Client.from_credentials(credentials.token_id, credentials.token_secret)
        items = modal.Workspace.from_context(client=client).billing.report(
            start=datetime.fromtimestamp(hour_start, timezone.utc), end=datetime.fromtimestamp(pull_end, timezone.utc),
            resolution="h", tag_names=sorted(tags) or None)
    except modal.exception.AuthError as exc:
        raise UserError(f"--bill modal: Modal rejected the credentials ({exc}); {CREDENTIALS_HINT}") from None
    except (modal.exception.Error, OSError) as exc:
        raise UserError(f"--bill modal: cannot get the billing report ({exc}); check the network and credentials") from None
    # An app by its name, or by its id (what a run that named its endpoint, modal:NAME, records as pricing.modal_app).
    kept = [item for item in items if item["description"] in app_names or item["object_id"] in app_names
            or (tags and all(item["tags"].get(k) == v for k, v in tags.items()))]
    rows = [{"object_id": i["object_id"], "description": i["description"], "interval_start": utc(i["interval_start"]).isoformat(),
             "cost": str(i["cost"]), "tags": dict(i["tags"])} for i in kept]
    buckets = buckets_of(rows)
    partial = [pull_end + n * HOUR_S for n in range(int((wanted_end - pull_end) // HOUR_S))]
    for hour in partial:
        rows.append({"description": "partial hour: not over yet, not billed by Modal", "partial": True,
                     "interval_start": datetime.fromtimestamp(hour, timezone.utc).isoformat(), "cost": None})
    if partial:
        print(f"--bill modal: the hour from {datetime.fromtimestamp(partial[0], timezone.utc):%H:%M} UTC is not over yet; "
              "Modal reports whole hours only, so its cost is not in this report; report again after "
              f"{datetime.fromtimestamp(wanted_end, timezone.utc):%H:%M} UTC", file=sys.stderr, flush=True)
    return buckets, rows
