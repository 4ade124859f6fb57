"""Harbor's Hub API, for a registry location written `hub+https://PROJECT.supabase.co`.

The Hub is a PostgREST service; Harbor 0.26's HarborRegistryClient asks it three things, and so does this
module, in the same shapes: the versions of a dataset (`GET /rest/v1/dataset?select=version&name=eq.NAME`),
one version with its tasks (`POST /rest/v1/rpc/get_dataset {p_name, p_version}`, answering
`{name, version, description, tasks: [{name, git_url, git_commit_id, path}], metrics}`), and the list
(`GET /rest/v1/dataset?select=name,version,description,dataset_task(count)`). The Hub's publishable key,
when it needs one, comes from HARBOR_SUPABASE_PUBLISHABLE_KEY (Harbor's own variable); it is sent as the
`apikey` header and never written anywhere. Every answer is cached, as the git registry's is.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.formats.sources.registry_index import (FETCH_TIMEOUT_S, HUB_PREFIX, chosen_version, read_cached,
                                                         redact, unknown_dataset)

KEY_ENV = "HARBOR_SUPABASE_PUBLISHABLE_KEY"


def hub_request(location: str, path: str, body: dict[str, Any] | None = None) -> str:
    import urllib.request

    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    key = os.environ.get(KEY_ENV)
    if key:
        headers.update({"apikey": key, "Authorization": f"Bearer {key}"})
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(location.removeprefix(HUB_PREFIX).rstrip("/") + path, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as answer:
        return str(answer.read().decode("utf-8"))


def hub_json(location: str, what: str, path: str, body: dict[str, Any] | None = None) -> Any:
    text = read_cached(location, what, lambda: hub_request(location, path, body))
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise UserError(f"the harbor hub {redact(location)} answered {path} with no JSON; check registries.harbor.url") from None


def hub_list(location: str) -> list[tuple[str, str, int, str]]:
    rows = hub_json(location, "list", "/rest/v1/dataset?select=name,version,description,dataset_task(count)")
    return [(str(r["name"]), str(r.get("version") or ""),
             int(r["dataset_task"][0]["count"]) if r.get("dataset_task") else 0, str(r.get("description") or ""))
            for r in rows or []]


def hub_dataset(location: str, name: str, version: str | None) -> dict[str, Any]:
    query = urllib.parse.urlencode({"select": "version", "name": f"eq.{name}"})
    versions = sorted(str(r["version"]) for r in hub_json(location, f"versions {name}", f"/rest/v1/dataset?{query}") or [])
    if not versions:
        unknown_dataset(name, sorted({row[0] for row in hub_list(location)}))
    chosen = chosen_version(name, version, versions)
    data = hub_json(location, f"dataset {name}@{chosen}", "/rest/v1/rpc/get_dataset",
                    {"p_name": name, "p_version": chosen})
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
        raise UserError(f"the harbor hub {redact(location)} has no tasks for {name}@{chosen}")
    unique: dict[tuple[Any, ...], dict[str, Any]] = {}
    for task in data["tasks"]:  # the Hub's legacy backend can list a task twice; Harbor keeps the first
        unique.setdefault((task.get("name"), task.get("git_url"), task.get("git_commit_id"), task.get("path")), task)
    return {"name": name, "version": chosen, "description": str(data.get("description") or ""),
            "tasks": list(unique.values())}
