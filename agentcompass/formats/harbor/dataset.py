"""Harbor's dataset.toml (harbor/models/dataset/manifest.py): the tasks a published dataset is made of.

A recipe names it with `source: {..., manifest: dataset.toml}` (relative to the dataset's root); the tasks
it lists, by their short names (`datacurve/abs-module-cache-flags` is the task dir `abs-module-cache-flags`),
are the benchmark, in its order. Digests pin each task's content in Harbor's registry; a git source pinned to
a commit pins the same content, so they are read, not recomputed.
"""

from __future__ import annotations

import os
import re
from typing import Any

import tomli
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentcompass.core.errors import UserError

ORG_NAME = re.compile(r"^[a-zA-Z0-9_.-]+/[a-zA-Z0-9_.-]+$")


class TaskRef(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    digest: str = ""

    @field_validator("name")
    @classmethod
    def org_slash_name(cls, value: str) -> str:
        if not ORG_NAME.match(value) or ".." in value or value.startswith("."):
            raise ValueError(f"a task's name is org/name, got {value!r}")
        return value

    @property
    def short_name(self) -> str:
        return self.name.split("/", 1)[1]


class DatasetInfo(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    description: str = ""


class DatasetManifest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # [metadata], [[files]]: nothing a verdict reads
    dataset: DatasetInfo
    tasks: list[TaskRef] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


def read_manifest(path: str) -> DatasetManifest:
    try:
        with open(path, "rb") as handle:
            return DatasetManifest.model_validate(tomli.load(handle))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file (the recipe's source.manifest)") from None
    except (OSError, tomli.TOMLDecodeError) as exc:
        raise UserError(f"{path}: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UserError(f"{path}: {where}: {first['msg']}; see Harbor's dataset.toml") from None


def manifest_task_dirs(root: str, manifest: str) -> list[str]:
    """The task dirs dataset.toml lists, in its order; one line naming any it lists that the dataset lacks."""
    path = os.path.join(root, manifest)
    refs = read_manifest(path).tasks
    if not refs:
        raise UserError(f"{path}: lists no [[tasks]]")
    dirs = [os.path.join(root, ref.short_name) for ref in refs]
    missing = [ref.name for ref, task_dir in zip(refs, dirs) if not os.path.isfile(os.path.join(task_dir, "task.toml"))]
    if missing:
        raise UserError(f"{path} lists {len(missing)} task(s) with no task.toml under {root}: "
                        f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; check source.ref and source.subdir")
    return dirs
