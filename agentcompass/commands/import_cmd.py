"""`agentcompass import cost-bench DIR --results-dir R --run-name N`: another tool's results as
ordinary results directories under R/N (one per setup), for report, report --verify and view."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

SOURCES = ("cost-bench",)
EXAMPLES = """examples:
  agentcompass import cost-bench results/deepswe33-glm-opus48 --results-dir results --run-name deepswe33
  agentcompass report results/deepswe33 --bill results/deepswe33-glm-opus48/billing.json \\
      --against results/deepswe33-glm-opus48/summary.csv
"""


def register(sub: Any) -> None:
    parser = sub.add_parser("import", help="another tool's results as agentcompass results directories",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", choices=SOURCES, help="cost-bench: the Coding Agent Cost Benchmark's published "
                        "results folder (per_run.csv, manifest.csv[, billing.json, summary.csv]) or raw runs/<id> folder")
    parser.add_argument("folder", type=Path, metavar="DIR", help="the folder to import")
    parser.add_argument("--results-dir", type=Path, default=Path("results"), metavar="R",
                        help="results root (default: results)")
    parser.add_argument("--run-name", required=True, metavar="N", help="the run name the setups go under (R/N)")


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    import shutil
    import tempfile

    from agentcompass.core.errors import UserError
    from agentcompass.interop.cost_bench import import_results

    if not args.folder.is_dir():
        raise UserError(f"import cost-bench: {args.folder} is not a folder; pass the benchmark's results folder "
                        "(the one holding per_run.csv and manifest.csv)")
    run_root = args.results_dir / args.run_name
    if run_root.exists() and any(run_root.iterdir()):
        raise UserError(f"import: {run_root} already holds results; pick another --run-name")
    made_root = not run_root.parent.exists()
    run_root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{args.run_name}.", dir=run_root.parent))
    try:  # written beside, then renamed: bad input leaves nothing behind
        written = import_results(args.folder, staging)
        if run_root.exists():
            run_root.rmdir()
        staging.rename(run_root)
    except BaseException:
        if made_root:
            shutil.rmtree(run_root.parent, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for directory in written:
        print(f"imported: {run_root / directory.name}", flush=True)
    print(f"next: agentcompass report {run_root}" + (f" --bill {args.folder / 'billing.json'}"
          if (args.folder / "billing.json").is_file() else "")
          + (f" --against {args.folder / 'summary.csv'}" if (args.folder / "summary.csv").is_file() else ""), flush=True)
    return 0
