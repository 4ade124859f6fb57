"""Runs inside the terminal-bench 0.2.18 side venv. stdin: JSON request; stdout: JSON answer.
  parse {cases: [{parser, output}]}   the parser's {test: status} and the harness's _is_resolved, or the error
  solution {paths}                    TerminalCommand.from_yaml_list's commands per file, or the error
"""

import json
import sys
from pathlib import Path

from terminal_bench.parsers.base_parser import UnitTestStatus
from terminal_bench.parsers.parser_factory import ParserFactory, ParserName
from terminal_bench.terminal.models import TerminalCommand


def parse(cases: list) -> list:
    out = []
    for case in cases:
        try:
            found = ParserFactory.get_parser(ParserName(case["parser"])).parse(case["output"])
        except Exception as exc:  # the harness's PARSE_ERROR
            out.append({"error": type(exc).__name__})
            continue
        out.append({"tests": {k: v.value for k, v in found.items()},
                    "resolved": all(v == UnitTestStatus.PASSED for v in found.values())})
    return out


def solution(paths: list) -> list:
    out = []
    for path in paths:
        try:
            out.append({"commands": [c.model_dump() for c in TerminalCommand.from_yaml_list(Path(path))]})
        except Exception as exc:
            out.append({"error": type(exc).__name__})
    return out


def main() -> None:
    request = json.load(sys.stdin)
    answer = sys.stdout
    sys.stdout = sys.stderr
    result = {"parse": lambda: parse(request["cases"]), "solution": lambda: solution(request["paths"])}[request["command"]]()
    json.dump(result, answer)


if __name__ == "__main__":
    main()
