"""The package's shape, checked on its import graph (grimp: every import, including those inside functions
and under TYPE_CHECKING): no circles, the core imports nothing above it, report and view read results
only, files stay small, and the names users type in configs resolve through the packages' faces."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

from agentcompass.core.registry import BUILTINS, load

PACKAGE = Path(__file__).resolve().parent.parent / "agentcompass"
MAX_LINES = 420  # "~400": a file may pass it only with its reason at its top (LONGER_BECAUSE)
LONGER_BECAUSE = "Longer than 400 lines because"
# What report/ and view/ may use of the core: the results layout and its meaning (and whether a run
# still holds its lock, whether an optional package is installed), never the runner.
READERS_MAY_USE = {"agentcompass.core.scoring", "agentcompass.core.results", "agentcompass.core.errors",
                   "agentcompass.core.task", "agentcompass.core.paths", "agentcompass.core.durable",
                   "agentcompass.core.calls", "agentcompass.core.schema", "agentcompass.core.merge",
                   "agentcompass.core.runlock", "agentcompass.core.registry", "agentcompass.core.safe_files",
                   "agentcompass.core.secret_values",  # a leaf: credentials masked in what readers write
                   "agentcompass.core.install"}  # the pip line of an extra: a string, runs nothing


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("agentcompass", include_external_packages=False)


def imports_of(graph: grimp.ImportGraph, module: str) -> set[str]:
    return set(graph.find_modules_directly_imported_by(module))


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in imports_of(graph, module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_round_a_circle(graph):
    assert circles(graph) == []


def test_circles_are_found(graph):
    """The check can fail: a graph with one circle added has it."""
    graph.add_import(importer="agentcompass.core.errors", imported="agentcompass.core.trial")
    try:
        assert any("agentcompass.core.errors" in c and "agentcompass.core.trial" in c for c in circles(graph))
    finally:
        graph.remove_import(importer="agentcompass.core.errors", imported="agentcompass.core.trial")


def test_the_core_imports_nothing_above_it(graph):
    """Arrows point into the core: it reaches providers, formats, harnesses, the gateway and the cost split
    by the registry's names (core.registry.BUILTINS), never by an import."""
    upward = sorted(f"{m} -> {i}" for m in graph.find_children("agentcompass.core") | {"agentcompass.core"}
                    for i in imports_of(graph, m) if not i.startswith("agentcompass.core"))
    assert upward == []


def test_report_and_view_read_results_and_never_run_anything(graph):
    readers = {m for top in ("agentcompass.report", "agentcompass.view", "agentcompass.analyze")
               for m in graph.find_descendants(top) | {top}}
    used = sorted(f"{m} -> {i}" for m in readers for i in imports_of(graph, m)
                  if i.startswith("agentcompass.core") and i not in READERS_MAY_USE)
    assert used == []


def test_analyze_reads_results_and_of_the_other_readers_only_the_trajectory_parser(graph):
    """analyze/ reuses view's trajectory adapters (a leaf: it imports only core.safe_files) and nothing else of
    report/ or view/, so the viewer can later show its flags without an import circle."""
    analyze = graph.find_descendants("agentcompass.analyze") | {"agentcompass.analyze"}
    wrong = sorted(f"{m} -> {i}" for m in analyze for i in imports_of(graph, m)
                   if i.startswith(("agentcompass.report", "agentcompass.view", "agentcompass.commands"))
                   and i != "agentcompass.view.trajectory")
    assert wrong == []


def test_implementations_never_import_the_commands_report_or_view(graph):
    above = ("agentcompass.commands", "agentcompass.report", "agentcompass.view", "agentcompass.analyze")
    implementations = {m for top in ("agentcompass.providers", "agentcompass.formats", "agentcompass.harnesses",
                                     "agentcompass.gateway") for m in graph.find_descendants(top) | {top}}
    wrong = sorted(f"{m} -> {i}" for m in implementations for i in imports_of(graph, m) if i.startswith(above))
    assert wrong == []


def test_files_are_small_or_say_why_not():
    long = []
    repo = PACKAGE.parent
    code = [*PACKAGE.rglob("*.py"), *(p for top in ("tests", "benchmarks", "scripts") for p in (repo / top).rglob("*.py")
                                      if "data" not in p.relative_to(repo).parts)]
    for path in sorted(code):
        lines = path.read_text().count("\n")
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > MAX_LINES and LONGER_BECAUSE not in docstring:
            long.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
    assert long == []


def test_the_tree_shows_the_architecture():
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert packages == ["analyze", "commands", "core", "endpoints", "formats", "gateway", "harnesses", "interop",
                        "providers", "regrade", "report", "view"]
    # api: the public contract for extensions (docs/extending.md), one path that stays put
    assert sorted(p.stem for p in PACKAGE.glob("*.py")) == ["__init__", "__main__", "api"]
    for group in ("providers", "formats"):
        assert all((PACKAGE / group / name / "__init__.py").is_file()
                   for name in {"providers": ("local", "docker", "modal", "gcp"),
                                "formats": ("harbor", "swebench", "terminal_bench", "cooperbench")}[group])


@pytest.mark.parametrize("kind,name", [(kind, name) for kind, names in BUILTINS.items() for name in names])
def test_every_built_in_name_loads(kind, name):
    assert load(kind, name) is not None


FACES = {  # what a user's YAML may name (impl: ...) and what it must be
    "agentcompass.providers.local:LocalProvider": "agentcompass.providers.local.provider:LocalProvider",
    "agentcompass.providers.docker:DockerProvider": "agentcompass.providers.docker.provider:DockerProvider",
    "agentcompass.providers.modal:ModalProvider": "agentcompass.providers.modal.provider:ModalProvider",
    "agentcompass.providers.gcp:GcpProvider": "agentcompass.providers.gcp.provider:GcpProvider",
    "agentcompass.providers.gcp.GcpBatchProvider": "agentcompass.providers.gcp.eval:GcpBatchProvider",
    "agentcompass.formats.harbor:HarborFormat": "agentcompass.formats.harbor.format:HarborFormat",
    "agentcompass.formats.swebench:SwebenchFormat": "agentcompass.formats.swebench.format:SwebenchFormat",
    "agentcompass.formats.terminal_bench:TerminalBenchFormat":
        "agentcompass.formats.terminal_bench.format:TerminalBenchFormat",
    "agentcompass.formats.cooperbench:CooperbenchFormat": "agentcompass.formats.cooperbench.format:CooperbenchFormat",
    "agentcompass.harnesses.base:Harness": "agentcompass.core.contracts:Harness",
    "agentcompass.formats.base:TaskFormat": "agentcompass.core.contracts:TaskFormat",
}


@pytest.mark.parametrize("face,home", FACES.items())
def test_names_users_type_keep_working_through_the_faces(face, home):
    kind = "provider" if ".providers." in face else "format"
    assert load(kind, face) is load(kind, home)
