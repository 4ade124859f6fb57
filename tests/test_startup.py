"""Start-up of a run: the config is composed once, the run still goes through Hydra's job machinery, and the
cycle collector, off while start-up builds what lives as long as the run, is on again afterwards."""

from __future__ import annotations

import gc
import json
from pathlib import Path

from hydra._internal.hydra import Hydra

from agentcompass.commands.cli import main
from harbor_factory import make_file_tasks, make_recipe


class Mark:
    """A Hydra callback (hydra.callbacks), as a user would add one: records what Hydra told it."""

    seen: list[str] = []

    def on_run_start(self, config, **kwargs):
        Mark.seen.append("run start")

    def on_job_start(self, config, **kwargs):
        Mark.seen.append(f"job start in {config.hydra.runtime.output_dir}")

    def on_job_end(self, config, job_return, **kwargs):
        Mark.seen.append(f"job end {job_return.status.name}")

    def on_run_end(self, config, **kwargs):
        Mark.seen.append("run end")


def test_a_run_composes_once_and_keeps_hydras_run_machinery(tmp_path, monkeypatch, capsys):
    make_file_tasks(tmp_path / "data", 3)
    make_recipe(tmp_path / "conf", "three", tmp_path / "data")
    composed = []
    compose_config = Hydra.compose_config
    monkeypatch.setattr(Hydra, "compose_config", lambda self, *a, **k: composed.append(k) or compose_config(self, *a, **k))
    monkeypatch.chdir(tmp_path)
    Mark.seen = []
    code = main(["run", "three", "oracle", "none", "--config-dir", str(tmp_path / "conf"), "--results-dir",
                 str(tmp_path / "res"), "--run-name", "once", f"+hydra.callbacks.mark._target_={__name__}.Mark"])
    assert code == 0, capsys.readouterr().err
    assert len(composed) == 1
    assert Mark.seen == ["run start", f"job start in {tmp_path}", "job end COMPLETED", "run end"]
    summary = json.loads((tmp_path / "res" / "once" / "three__oracle__none__local" / "summary.json").read_text())
    assert summary["passed"] == 3
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_bad_input_leaves_the_collector_on(tmp_path, capsys):
    assert main(["run", "nosuch", "oracle", "none", "--results-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: ") and not any(Path(tmp_path).iterdir())
    assert gc.isenabled()
