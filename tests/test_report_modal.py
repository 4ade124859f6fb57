"""`agentcompass report --bill modal` against the recording fake of the Modal SDK, every call bound
to the real SDK's signature (modal.Workspace.from_context, WorkspaceBillingManager.report)."""

from __future__ import annotations

import csv
import inspect
import json

import pytest

import fake_modal
from modal_sdk import modal_cli, real_modal  # noqa: F401  (fixtures)
from test_report import T0, iso, sweep  # noqa: F401  (the sweep fixture)


def bill_rows(tmp_path):
    """Hour -1: $0.10 idle; hour 0: $0.50 + $0.40 of the endpoint's app and $5 of another app;
    hour +1: $0.25 (after the run's window, which ends within hour 0)."""
    rows = [("glm-endpoint", T0 - 3600, "0.10"), ("glm-endpoint", T0, "0.50"), ("glm-endpoint", T0, "0.40"),
            ("other-app", T0, "5.00"), ("glm-endpoint", T0 + 3600, "0.25")]
    path = tmp_path / "billing-rows.json"
    path.write_text(json.dumps([{"description": d, "interval_start": iso(t), "cost": c} for d, t, c in rows]))
    return path


def after_the_run(tmp_path):
    """The sweep ran at T0 (in the future): the CLI's clock, hours after it, so that every hour of it is over."""
    (tmp_path / "shim" / "sitecustomize.py").write_text(
        f"import agentcompass.report.bill as bill\nbill.clock = lambda: {T0 + 5 * 3600}\n")


def test_the_modal_bill_of_the_runs_window_is_split_and_verify_needs_no_second_call(modal_cli, real_modal, sweep, tmp_path):  # noqa: F811
    after_the_run(tmp_path)
    env = {fake_modal.BILLING_ENV: str(bill_rows(tmp_path)), "MODAL_TOKEN_ID": "ak-bill", "MODAL_TOKEN_SECRET": "as-bill"}
    proc, sdk = modal_cli("report", str(sweep), "--bill", "modal", "--modal-app", "glm-endpoint", env=env)
    assert proc.returncode == 0, proc.stderr
    assert [c["call"] for c in sdk] == ["Client.from_credentials", "Workspace.from_context", "WorkspaceBillingManager.report"]
    assert sdk[0]["args"] == ["ak-bill", "as-bill"]
    # The trials run from T0 - 1 s to T0 + 41 s: whole hours from T0 - 1 h to T0 + 1 h, hourly.
    assert sdk[2]["kwargs"] == {"start": iso(T0 - 3600).replace(".000", ""), "end": iso(T0 + 3600).replace(".000", ""),
                                "resolution": "h", "tag_names": None}
    real = {"Client.from_credentials": (real_modal.Client.from_credentials, True),
            "Workspace.from_context": (real_modal.Workspace.from_context, False),
            "WorkspaceBillingManager.report": (real_modal.workspace.WorkspaceBillingManager.report, True)}
    from datetime import datetime

    for call in sdk:
        function, needs_self = real[call["call"]]
        kwargs = {k: datetime.fromisoformat(v) if k in ("start", "end") else v for k, v in call["kwargs"].items()}
        inspect.signature(function).bind(*((None,) if needs_self else ()), *call["args"], **kwargs)
    # Hour 0 of the endpoint: $0.90 x 33/3600 inside the jobs' window, over 30 s of generation
    # (hand-computed in test_report's bill test): none-t1 $0.004125, high-t1 $0.001375, high-t2 $0.00275.
    # Hour -1's $0.10: 1 s of it inside the window ($0.10/3600 = $0.000028), no generation: unattributed.
    out = sweep / "report"
    costs = {(r["setup"].rsplit("__", 1)[-1], r["task_id"]): r["cost_usd"] for r in csv.DictReader((out / "per_trial.csv").open())}
    assert (costs[("none", "t1")], costs[("high", "t1")], costs[("high", "t2")]) == ("0.004125", "0.001375", "0.002750")
    billing = json.loads((out / "billing.json").read_text())
    assert (billing["source"], billing["billed_usd"], billing["split_usd"], billing["unattributed_usd"]) == (
        "modal", "0.008278", "0.008250", "0.000028")
    assert billing["groups"][0]["bill_usd"] == "1.000000"
    assert {r["description"] for r in billing["groups"][0]["rows"]} == {"glm-endpoint"}
    log = tmp_path / "sdk-calls.jsonl"
    log.unlink()
    proc, sdk = modal_cli("report", str(sweep), "--verify", env=env)
    assert proc.returncode == 0, proc.stderr
    assert sdk == []  # verify reads the bill kept in billing.json


@pytest.mark.parametrize("extra, message", [
    ([], "--bill modal: no Modal credentials"),
    (["MODAL_TOKEN_ID=" + fake_modal.REJECTED_TOKEN], "Modal rejected the credentials"),
])
def test_modal_bill_without_usable_credentials_is_a_user_error(modal_cli, sweep, extra, message, tmp_path):  # noqa: F811
    after_the_run(tmp_path)
    env = dict(e.split("=", 1) for e in extra) | ({"MODAL_TOKEN_SECRET": "as-x"} if extra else {})
    proc, _ = modal_cli("report", str(sweep), "--bill", "modal", "--modal-app", "glm-endpoint", env=env)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (sweep / "report").exists()


def test_modal_bill_needs_the_endpoints_app(modal_cli, sweep):  # noqa: F811
    proc, sdk = modal_cli("report", str(sweep), "--bill", "modal", env={"MODAL_TOKEN_ID": "a", "MODAL_TOKEN_SECRET": "b"})
    assert proc.returncode == 2 and "--modal-app" in proc.stderr and sdk == []


def test_the_modal_pull_ends_at_the_last_complete_hour_and_flags_the_partial_one(real_modal, tmp_path, monkeypatch):  # noqa: F811
    """The SDK drops a partial final interval: a report made inside the run's last hour pulls the hours that are
    over and flags that one as not billed yet, instead of counting it as $0."""
    from datetime import datetime, timezone

    from agentcompass.report.bill import modal_bill

    fake_modal.reset()
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "none.toml"))
    fake_modal.imported()
    monkeypatch.setitem(__import__("sys").modules, "modal", fake_modal)
    monkeypatch.setenv(fake_modal.BILLING_ENV, str(bill_rows(tmp_path)))
    hour = T0 // 3600 * 3600
    buckets, rows = modal_bill(T0 - 1, T0 + 41, ["glm-endpoint"], {}, "ak-x", "as-x", now=T0 + 600)
    [(_, _, report)] = [c for c in fake_modal.calls if c[0] == "WorkspaceBillingManager.report"]
    assert (report["start"], report["end"]) == (datetime.fromtimestamp(hour - 3600, timezone.utc).isoformat(),
                                                datetime.fromtimestamp(hour, timezone.utc).isoformat())
    assert [b.start for b in buckets] == [hour - 3600]  # hour 0 is not over: not in the buckets as $0
    [flagged] = [r for r in rows if r.get("partial")]
    assert flagged["interval_start"] == datetime.fromtimestamp(hour, timezone.utc).isoformat() and flagged["cost"] is None
    with pytest.raises(Exception, match="no hour of the run is over yet"):
        modal_bill(T0 - 1, T0 + 41, ["glm-endpoint"], {}, "ak-x", "as-x", now=hour - 3600 + 5)
