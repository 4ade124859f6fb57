"""A hub dataset with no network: one quick probe, then a fast one-line error (issue 15.9)."""

from __future__ import annotations

import time

from dead_endpoints import refusing_endpoint


def test_an_unreachable_hub_fails_fast_without_retries(cli, tmp_path):
    env = {"HF_ENDPOINT": refusing_endpoint().removesuffix("/v1"), "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_OFFLINE": "", "HF_DATASETS_OFFLINE": ""}
    start = time.monotonic()
    proc = cli("run", "swebench_lite", "oracle", "none", "--results-dir", str(tmp_path / "r"), cwd=tmp_path, env=env)
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot load dataset 'SWE-bench/SWE-bench_Lite'" in proc.stderr
    assert "did not answer" in proc.stderr and "not in the local cache" in proc.stderr
    assert "Retry" not in proc.stderr
    assert elapsed < 45, f"{elapsed:.0f}s"  # a CLI start on a busy machine; retries are caught above
    assert not (tmp_path / "r").exists()
