"""Names and labels the kubernetes provider gives its pods: valid where Kubernetes is strict, and never the same
for two different trials (no docker, no cluster)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("kubernetes")

from agentcompass.providers.kubernetes.pod import label_value, pod_name  # noqa: E402

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
VALUE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


@pytest.mark.parametrize("name", ["plain-name.1", "Django__django-11099.1", "x" * 300, "__weird__", "ünïcode task.2", "-"])
def test_pod_names_are_dns_labels(name):
    made = pod_name(name)
    assert DNS_LABEL.match(made) and len(made) <= 63, made


def test_names_that_had_to_change_never_collide():
    pairs = [("Task_A.1", "task-a.1"), ("a" * 80 + "1", "a" * 80 + "2"), ("run one", "run_one")]
    for one, other in pairs:
        assert pod_name(one) != pod_name(other)
        assert label_value(one) != label_value(other)


@pytest.mark.parametrize("value", ["20261203-121402-877641-jn3g", "my run", "a/b/c", "x" * 100, "_lead", "é"])
def test_label_values_are_valid(value):
    made = label_value(value)
    assert VALUE.match(made) and len(made) <= 63, made


def test_a_bad_setting_is_one_line_and_exit_2(cli, tmp_path):
    done = cli("run", "demo", "oracle", "none", "--env", "kubernetes", "--env-params", '{"image_pull_policy": "Sometimes"}',
               "--results-dir", str(tmp_path / "r"))
    assert done.returncode == 2 and "image_pull_policy" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "r").exists()
