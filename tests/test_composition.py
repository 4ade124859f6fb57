"""Config composition: shipped YAML, user dirs, flags, overrides and --config overlays."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from agentcompass.core.config import GROUPS, Invocation, compose, finalize, group_entries, make_hydra, search_roots
from agentcompass.core.errors import UserError

ALWAYS = {"benchmark": "demo", "harness": "oracle", "model": "none", "env": "local"}


def resolved_for(*extra: str, config_dirs: list[Path] | None = None, config_files: list[Path] | None = None,
                 api_key: str | None = None, **names: str):
    chosen = {**ALWAYS, **names}
    overrides = [f"{GROUPS[k][1]}={v}" for k, v in chosen.items()] + list(extra)
    invocation = Invocation(overrides, config_files or [], config_dirs or [], api_key, typed={o: f"'{o}'" for o in extra})
    return finalize(compose(make_hydra(invocation.roots()), overrides), invocation)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("key", list(GROUPS))
def test_every_shipped_yaml_composes_and_validates(key):
    entries = group_entries(key, search_roots([]))
    assert entries, f"no shipped {key} options"
    for name in entries:
        if key == "model" and name == "custom":
            resolved = resolved_for("model.name=openai/gpt-4o-mini", model="custom")
            assert resolved.labels["model"] == "openai/gpt-4o-mini"  # a raw string labels by itself
            continue
        elif key == "model" and name == "openai_compatible":  # the preset leaves name and endpoint to the user
            resolved = resolved_for("model.name=my-model", "model.base_url=http://127.0.0.1:8000/v1", model=name)
        elif key == "harness":
            resolved = resolved_for(harness=name)
        else:
            resolved = resolved_for(**{key: name})
        assert resolved.labels[key] == name


def test_precedence_shipped_then_user_dir_then_flags_then_config_file(tmp_path):
    user = tmp_path / "user"
    write(user / "recipes" / "demo.yaml", """
        name: demo
        description: replaced by the user
        format: harbor
        source: {path: %s}
        runs_on_host: true
        params: {limit: 1}
    """ % (Path(__file__).resolve().parent.parent / "recipes" / "demo"))
    assert resolved_for(config_dirs=[user]).benchmark.params["limit"] == 1
    assert resolved_for("run.k=3", config_dirs=[user]).run.k == 3
    assert resolved_for("++benchmark.params.limit=2", config_dirs=[user]).benchmark.params["limit"] == 2
    overlay = write(tmp_path / "private.yaml", "benchmark: {params: {limit: 4}}\nrun: {k: 5}\n")
    resolved = resolved_for("++benchmark.params.limit=2", "run.k=3", config_dirs=[user], config_files=[overlay])
    assert resolved.benchmark.params["limit"] == 4 and resolved.run.k == 5


def test_later_config_files_win(tmp_path):
    first = write(tmp_path / "a.yaml", "run: {k: 2, task_concurrency: 7}\n")
    second = write(tmp_path / "b.yaml", "run: {k: 9}\n")
    resolved = resolved_for(config_files=[first, second])
    assert (resolved.run.k, resolved.run.task_concurrency) == (9, 7)


def test_user_dir_adds_entries_and_env_path_is_searched(tmp_path, monkeypatch):
    extra = tmp_path / "extra"
    write(extra / "harnesses" / "my_oracle.yaml", "name: my_oracle\nimpl: oracle\ndescription: mine\n")
    write(extra / "models" / "my-model.yaml", "name: openai/my-model\ndescription: m\n")
    monkeypatch.setenv("AGENTCOMPASS_CONFIG_PATH", str(extra))
    resolved = resolved_for(harness="my_oracle", model="my-model")
    assert resolved.harness.name == "my_oracle" and resolved.model.name == "openai/my-model"
    assert "demo" in group_entries("benchmark", search_roots([]))  # shipped entries are still there


def test_recipe_inheritance_and_per_provider_overrides(tmp_path):
    user = tmp_path / "user"
    write(user / "recipes" / "demo_small.yaml", """
        defaults: [demo, _self_]
        name: demo_small
        params: {limit: 2}
        overrides:
          local: {timeouts: {agent: 42}}
    """)
    resolved = resolved_for(config_dirs=[user], benchmark="demo_small")
    assert resolved.benchmark.name == "demo_small"
    assert resolved.benchmark.format == "harbor" and resolved.benchmark.runs_on_host  # inherited
    assert resolved.benchmark.params["limit"] == 2
    assert resolved.benchmark.timeouts.agent == 42  # the local provider's override applied


def test_environments_block_merges_into_env(tmp_path):
    overlay = write(tmp_path / "p.yaml", "environments: {local: {isolation: none}}\n")
    assert resolved_for(config_files=[overlay]).env.model_extra["isolation"] == "none"


def test_typo_in_recipe_names_file_and_key(tmp_path):
    user = tmp_path / "user"
    path = write(user / "recipes" / "typo.yaml", "name: typo\nformat: harbor\ntimeout: {agent: 1}\n")
    with pytest.raises(UserError) as err:
        resolved_for(config_dirs=[user], benchmark="typo")
    assert "benchmark.timeout" in str(err.value) and str(path) in str(err.value)


def test_typo_in_provider_settings_is_caught(tmp_path):
    overlay = write(tmp_path / "p.yaml", "environments: {local: {isolaton: none}}\n")
    with pytest.raises(UserError, match="isolaton"):
        resolved_for(config_files=[overlay])


def test_oc_env_secrets_resolve_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY", "secret-value-123")
    overlay = write(tmp_path / "p.yaml", "model: {api_key: '${oc.env:MY_KEY}'}\n")
    resolved = resolved_for("model.name=openai/x", config_files=[overlay], model="custom")
    assert resolved.model.api_key.get_secret_value() == "secret-value-123"
    assert "secret-value-123" not in yaml.safe_dump(resolved.model_dump(mode="json"))


def test_cli_api_key_beats_config_file(tmp_path):
    overlay = write(tmp_path / "p.yaml", "model: {api_key: from-file}\n")
    resolved = resolved_for("model.name=openai/x", config_files=[overlay], api_key="from-flag", model="custom")
    assert resolved.model.api_key.get_secret_value() == "from-flag"


def test_redact_hides_credential_keys_but_not_token_counts():
    from agentcompass.core.config import redact

    shown = redact({"token_id": "ak-1", "token_secret": "as-2", "api_key": "k", "apikey": "k2",
                    "credentials_file": "/secret.json", "password": None,
                    "params": {"max_tokens": 512}, "name": "openai/x"})
    assert shown == {"token_id": "***", "token_secret": "***", "api_key": "***", "apikey": "***",
                     "credentials_file": "***", "password": None, "params": {"max_tokens": 512}, "name": "openai/x"}


def test_relative_paths_follow_where_they_were_written(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    typed = resolved_for("++benchmark.params.path=rows.jsonl", "++benchmark.params.repos_dir='~/checkouts'",
                         benchmark="swebench_lite")
    assert typed.benchmark.params["path"] == str(work / "rows.jsonl")  # typed here: the current directory
    assert typed.benchmark.params["repos_dir"] == str(Path.home() / "checkouts")
    overlay = write(tmp_path / "conf" / "private.yaml", "benchmark: {params: {path: ../data/rows.jsonl}}\n")
    from_file = resolved_for(config_files=[overlay], benchmark="swebench_lite")
    assert Path(from_file.benchmark.params["path"]).resolve() == tmp_path / "data" / "rows.jsonl"  # the file's dir
    recipes = Path(__file__).resolve().parent.parent / "recipes"
    assert resolved_for().benchmark.source["path"] == str(recipes / "demo")  # a recipe's own: relative to the recipe


def test_an_unused_section_may_hold_an_unset_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTCOMPASS_TEST_UNSET_VAR", raising=False)
    overlay = write(tmp_path / "p.yaml", "environments: {modal: {token_id: '${oc.env:AGENTCOMPASS_TEST_UNSET_VAR}'}}\n"
                                         "model: {api_key: '${oc.env:AGENTCOMPASS_TEST_UNSET_VAR,null}'}\n")
    resolved = resolved_for(config_files=[overlay])
    assert resolved.env.name == "local" and resolved.model.api_key is None
    with pytest.raises(UserError, match="environment variable AGENTCOMPASS_TEST_UNSET_VAR is not set"):
        resolved_for(config_files=[overlay], env="modal")


def test_api_key_env_names_a_variable_and_is_shown():
    from agentcompass.core.config import is_secret_override, redact

    assert redact({"api_key_env": "OPENAI_API_KEY", "api_key": "sk-1"}) == {"api_key_env": "OPENAI_API_KEY", "api_key": "***"}
    assert not is_secret_override("model.api_key_env=MY_KEY") and is_secret_override("model.api_key=sk-1")
