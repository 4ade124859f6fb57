"""The Harbor task.toml schema table of docs/formats/harbor-schema.md, read from Harbor's own pydantic models.

    python scripts/harbor_schema_table.py [--harbor-python PY] > docs/formats/harbor-schema.md

Harbor needs Python >= 3.12, so its models are walked by this same file run with `--walk` under a Python
that has `harbor` installed (PY; by default tests/sidevenv.py's venv of the pinned version is made or reused).
The walk prints one JSON row per field: its dotted path (`[]` for a list's items), type, default and
description. The table adds how agentcompass treats each field (agentcompass/formats/harbor/fields.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HARBOR = "harbor==0.26.0"
REPO = Path(__file__).resolve().parent.parent


def walk(model: Any, prefix: str = "") -> list[dict[str, Any]]:
    """Every field of a pydantic model and of the models its fields hold, depth first."""
    from typing import get_args

    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    def models_in(annotation: Any) -> list[type]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for arg in get_args(annotation) for m in models_in(arg)]

    def is_list(annotation: Any) -> bool:
        origin = getattr(annotation, "__origin__", None)
        return origin is list or any(is_list(arg) for arg in get_args(annotation))

    model.model_rebuild()  # forward references ("MCPServerConfig") resolved before the annotations are read
    rows = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        default = info.default if info.default is not PydanticUndefined else (
            "(required)" if info.default_factory is None else info.default_factory())
        if isinstance(default, BaseModel):
            default = "(its fields' defaults)"
        elif default == "":
            default = '""'
        rows.append({"path": path, "type": type_name(info.annotation),
                     "default": default if isinstance(default, str) else json.dumps(default, default=str),
                     "description": " ".join((info.description or "").split())})
        inner = f"{path}[]." if is_list(info.annotation) else f"{path}."
        for sub in models_in(info.annotation):
            rows += walk(sub, inner)
    return rows


def type_name(annotation: Any) -> str:
    """`str | None`, `list[ArtifactConfig]`, an enum as its values: `"public" | "no-network" | "allowlist"`."""
    import enum
    from typing import get_args, get_origin

    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " | ".join(json.dumps(member.value) for member in annotation)
    if isinstance(annotation, type):
        return "None" if annotation is type(None) else annotation.__name__
    args, origin = get_args(annotation), get_origin(annotation)
    if origin is None or not args:
        return str(annotation).replace("typing.", "")
    if str(origin) in ("typing.Union", "<class 'types.UnionType'>"):
        return " | ".join(type_name(arg) for arg in args)
    if str(origin) == "typing.Literal":
        return " | ".join(json.dumps(arg) for arg in args)
    return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(arg) for arg in args)}]"


def harbor_rows(python: str | None = None) -> list[dict[str, Any]]:
    """The walk of Harbor's TaskConfig, run under a Python that has harbor."""
    if python is None:
        sys.path.insert(0, str(REPO / "tests"))
        from sidevenv import side_venv

        python = str(side_venv("harbor", "3.12", [HARBOR]))
    done = subprocess.run([python, __file__, "--walk"], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def table(rows: list[dict[str, Any]]) -> str:
    sys.path.insert(0, str(REPO))
    from agentcompass.formats.harbor.fields import handling

    version = HARBOR.split("==")[1]
    lines = [
        "# Harbor's task.toml schema, field by field",
        "",
        f"Generated from Harbor {version}'s own pydantic models (`harbor/models/task/config.py`) by "
        "`python scripts/harbor_schema_table.py > docs/formats/harbor-schema.md`; "
        "`tests/conformance/test_harbor_schema_complete.py` fails when Harbor has a field agentcompass does not know.",
        "",
        "Every field is honoured, or the task is refused on the envs that cannot honour it (one line naming the field "
        "and the env; the other tasks of the run still run). Only fields that cannot change a verdict "
        "(names, descriptions, metadata) are read and left unused. A key Harbor does not define either is refused, "
        "except under `[task]` and `[metadata]`, where it gets one warning.",
        "",
        "| field | type | Harbor's default | agentcompass |",
        "|---|---|---|---|",
    ]
    for row in rows:
        cell = lambda s: str(s).replace("|", "\\|")  # noqa: E731
        lines.append(f"| `{row['path']}` | `{cell(row['type'])}` | `{cell(row['default'])}` | {cell(handling(row['path']))} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walk", action="store_true", help="print Harbor's fields as JSON (run under harbor's Python)")
    parser.add_argument("--harbor-python", help="a Python with harbor installed (default: the side venv)")
    args = parser.parse_args()
    if args.walk:
        from harbor.models.task.config import TaskConfig

        print(json.dumps(walk(TaskConfig)))
        return
    sys.stdout.write(table(harbor_rows(args.harbor_python)))


if __name__ == "__main__":
    main()
