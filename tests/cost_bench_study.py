"""The Coding Agent Cost Benchmark's published study deepswe33-glm-opus48 (33 DeepSWE tasks x 4 runs x
4 setups; data/cost-bench/, copied unchanged from the benchmark's results/) as agentcompass results
directories, made by the shipped importer (`agentcompass import cost-bench`, agentcompass/interop/):
a report over real figures at real sizes."""

from __future__ import annotations

from pathlib import Path

STUDY = Path(__file__).parent / "data" / "cost-bench" / "deepswe33-glm-opus48"


def write_study(root: Path) -> Path:
    """The four setups under root/deepswe33, as `agentcompass import cost-bench STUDY --results-dir root
    --run-name deepswe33` writes them."""
    from agentcompass.interop.cost_bench import import_results

    run = root / "deepswe33"
    import_results(STUDY, run)
    return run
