"""Each command's --help and the README and docs agree: every flag is documented, a default the help
states is the one the docs' table row states, and the README's commands table names only commands and
flags that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentcompass.commands.cli import build_parser, subcommands

REPO = Path(__file__).resolve().parent.parent
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
DEFAULT = re.compile(r"\(default:? ([^;)]+)")


def commands() -> dict[str, object]:
    """`run`, `config show`, `env check`, ... -> its parser."""
    found: dict[str, object] = {}

    def walk(parser: object, path: list[str]) -> None:
        nested = subcommands(parser)
        if not nested:
            found[" ".join(path)] = parser
        for name, sub in nested.items():
            walk(sub, [*path, name])

    walk(build_parser(), [])
    return found


COMMANDS = commands()


def options(parser: object) -> list[object]:
    return [a for a in parser._actions if a.option_strings and "--help" not in a.option_strings]


def long_flag(action: object) -> str:
    return max(action.option_strings, key=len)


def doc_text() -> str:
    return "\n".join(path.read_text() for path in DOC_FILES)


def table_rows(flag: str) -> list[str]:
    """Table rows of the README and docs whose first cell names the flag."""
    rows = []
    for path in DOC_FILES:
        for line in path.read_text().splitlines():
            cells = line.split("|")
            if line.startswith("|") and len(cells) > 2 and re.search(rf"`{re.escape(flag)}(?:[ `]|$)", cells[1]):
                rows.append(line.replace("`", ""))
    return rows


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_of_every_command_is_documented(command):
    text = doc_text()
    missing = [long_flag(a) for a in options(COMMANDS[command]) if f"`{long_flag(a)}" not in text
               and f" {long_flag(a)} " not in text]
    assert not missing, f"`agentcompass {command} --help` has flags the README and docs never name: {missing}"


TABLED = ("run", "config show", "validate", "eval")  # the commands docs/commands.md's flags table speaks for


@pytest.mark.parametrize("command", TABLED)
def test_a_default_the_help_states_is_the_one_the_docs_table_states(command):
    for action in options(COMMANDS[command]):
        stated = DEFAULT.search(" ".join((action.help or "").split()))
        rows = table_rows(long_flag(action))
        if not stated or not rows:
            continue
        value = stated.group(1).strip().rstrip(".")
        assert any(value in row for row in rows), (
            f"`agentcompass {command} --help` says {long_flag(action)} defaults to {value!r}; the docs' row says "
            f"otherwise: {rows}")


def test_the_run_flags_table_has_a_row_for_every_run_flag():
    for action in options(COMMANDS["run"]):
        flag = long_flag(action)
        assert table_rows(flag) or flag in ("--multirun",) and table_rows("-m"), f"no row for {flag} in docs/commands.md"


def readme_commands_table() -> list[tuple[list[str], list[str]]]:
    """(command words, flags) of each row of the README's commands table."""
    text = (REPO / "README.md").read_text()
    table = text.split("## Commands", 1)[1].split("\n\n", 2)[1]
    rows = []
    for line in table.splitlines()[2:]:
        usage = re.search(r"`([^`]+)`", line).group(1)
        rows.append(([w for w in usage.split() if re.fullmatch(r"[a-z]+", w)], re.findall(r"--[a-z][a-z-]*", usage)))
    return rows


def test_the_readme_commands_table_names_real_commands_and_their_flags():
    rows = readme_commands_table()
    assert len(rows) >= 9
    for words, flags in rows:
        name = next((" ".join(words[:n]) for n in (2, 1) if " ".join(words[:n]) in COMMANDS), None)
        assert name is not None, f"README's commands table names `{' '.join(words)}`, which is no command"
        known = {o for a in options(COMMANDS[name]) for o in a.option_strings}
        assert set(flags) <= known, f"README's row for `{name}` names flags it lacks: {set(flags) - known}"
    assert {" ".join(w[:2]) if " ".join(w[:2]) in COMMANDS else w[0] for w, _ in rows} >= set(COMMANDS) - {"config"}


def test_the_readme_lists_the_choices_the_parsers_take():
    from agentcompass.core.catalog import known_envs
    from agentcompass.commands.cleanup import CLEANABLE

    readme = (REPO / "README.md").read_text().replace("\\|", "|")

    def listed(before: str) -> set[str]:
        return set(re.search(rf"{re.escape(before)}\[?([a-z|]+)", readme).group(1).split("|"))

    [choices] = [a.choices for a in COMMANDS["list"]._actions if a.dest == "group"]
    assert listed("`list ") == set(choices) - {"tasks"}
    assert listed("`cleanup --env ") == set(CLEANABLE)
    assert listed("`env check ") == set(known_envs())
