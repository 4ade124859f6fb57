"""`agentcompass config gcp`: set up the gcp env and write a PRIVATE config file for it.

Checks Application Default Credentials, the project, region and zone, the APIs the env uses
(compute, batch, storage) and the firewall rule that lets SSH reach the VMs; creates the eval bucket
(with its lifecycle rule) when asked; then writes the settings to a private file (mode 600, never
one of the shipped YAML folders) and prints the --config to use. Every question has a flag, so
`--yes` with flags runs without a prompt; otherwise the missing answers are read from stdin.
Exit 0 when everything is ready, 1 when something is missing (the file is written all the same, with
the steps to finish), 2 for bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

DEFAULT_OUTPUT = Path("~/.config/agentcompass/gcp.yaml")
EXAMPLES = """examples:
  agentcompass config gcp                                   # asks for each value
  agentcompass config gcp --project my-proj --zone europe-west4-b --bucket my-proj-agentcompass \\
      --create-bucket --yes --output ~/agentcompass-gcp.yaml
"""


def register(config_subparsers: Any) -> None:
    parser = config_subparsers.add_parser(
        "gcp", help="check GCP credentials, project, APIs and firewall; create the eval bucket; write a private --config",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", metavar="ID", help="default GOOGLE_CLOUD_PROJECT, then the credentials' project")
    parser.add_argument("--zone", metavar="ZONE", help="where VMs go (default us-central1-a)")
    parser.add_argument("--region", metavar="REGION", help="where Batch jobs and a new bucket go (default the zone's)")
    parser.add_argument("--bucket", metavar="NAME", help="GCS bucket for eval on Batch (default agentcompass-PROJECT)")
    parser.add_argument("--create-bucket", action=argparse.BooleanOptionalAction, default=None,
                        help="create the bucket when it is missing (asked when not given)")
    parser.add_argument("--credentials-file", metavar="FILE", help="a service-account key file instead of ADC")
    parser.add_argument("--output", type=Path, metavar="FILE", help=f"the private config to write (default {DEFAULT_OUTPUT})")
    parser.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    parser.add_argument("--yes", action="store_true", help="ask nothing: defaults for what the flags do not give")
    parser.set_defaults(config_command="gcp")


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    from agentcompass.core.errors import UserError
    from agentcompass.providers.gcp.provider import GcpProvider
    from agentcompass.providers.gcp.api import found_credentials
    from agentcompass.providers.gcp.setup import (APIS, CREDENTIAL_STEPS, credentials_source, firewall_step,
                                                  probe_apis, ssh_firewall_rule)
    from agentcompass.core.registry import check_extra

    check_extra(GcpProvider, "env 'gcp'")
    ask = asker(args.yes)
    output = check_output((args.output or DEFAULT_OUTPUT).expanduser(), args.force, ask)
    defaults = GcpProvider.Settings()
    missing: list[str] = []  # steps left to the user
    try:
        credentials, found_project = found_credentials(args.credentials_file)
    except UserError:
        print("✗ credentials: none found (no key file, no gcloud ADC, no metadata server)")
        write_unchecked(args, output, defaults)
        print("set up:\n" + "".join(f"  {n}. {step}\n" for n, step in enumerate(CREDENTIAL_STEPS, 1)), end="")
        return 1
    print(f"✓ credentials: {credentials_source(args.credentials_file, '--credentials-file') or 'the metadata server'}")
    project = args.project or ask("GCP project", os.environ.get("GOOGLE_CLOUD_PROJECT") or found_project)
    if not project:
        raise UserError("no GCP project: pass --project ID (or set GOOGLE_CLOUD_PROJECT)")
    zone = args.zone or ask("zone for VMs", defaults.zone)
    region = args.region or ask("region for Batch jobs and the bucket", zone.rsplit("-", 1)[0])
    print(f"✓ project {project}, zone {zone}, region {region}")
    probes = probe_apis(credentials, project, zone, region)
    for probe in probes:
        print(f"{'✓' if probe.ok else '✗'} {probe.name} API" + ("" if probe.ok else f": {probe.detail}"))
    disabled = [APIS[p.name] for p in probes if not p.ok]
    if disabled:
        missing.append(f"gcloud services enable {' '.join(disabled)} --project {project}")
    try:
        rule = ssh_firewall_rule(credentials, project, defaults.network, list(defaults.network_tags))
    except Exception:  # the compute API's state is reported above
        rule = None
    if rule:
        print(f"✓ SSH firewall rule: {rule}")
    else:
        print(f"✗ no firewall rule lets SSH reach VMs tagged {', '.join(defaults.network_tags)} (needed by run --env gcp)")
        missing.append(firewall_step(project, defaults.network, list(defaults.network_tags)))
    bucket = args.bucket or ask("GCS bucket for eval on GCP Batch", f"agentcompass-{project}")
    if not ensure_bucket(credentials, project, bucket, region, args.create_bucket, ask, defaults.batch.blob_ttl_days):
        missing.append(f"create the bucket: agentcompass config gcp --bucket {bucket} --create-bucket, "
                       f"or gcloud storage buckets create gs://{bucket} --project {project} --location {region}")
    write_config(output, project, zone, region, bucket, args.credentials_file)
    print(f"wrote {output}; use it with --config {output}, e.g.\n"
          f"  agentcompass env check gcp --config {output}\n"
          f"  agentcompass eval swebench_verified --predictions preds.jsonl --env gcp --config {output}")
    if missing:
        print("still to do:\n" + "".join(f"  {n}. {step}\n" for n, step in enumerate(missing, 1)), end="")
        return 1
    return 0


def write_unchecked(args: argparse.Namespace, output: Path, defaults: Any) -> None:
    """Without credentials nothing can be checked, but a known project still gets its file (the flags'
    values, else the defaults), as with any other step left to do; with no project there is nothing to write."""
    project = args.project or os.environ.get("GOOGLE_CLOUD_PROJECT")
    if not project:
        print(f"no file written: no project known; pass --project ID to write {output} all the same")
        return
    zone = args.zone or defaults.zone
    write_config(output, project, zone, args.region or zone.rsplit("-", 1)[0], args.bucket or f"agentcompass-{project}",
                 args.credentials_file)
    print(f"wrote {output} (unchecked); use it with --config {output} once the credentials are set up")


def asker(never: bool) -> Callable[[str, str | None], str | None]:
    """A prompt on stderr with the default in brackets, answered from stdin; `never`: the default, unasked."""
    from agentcompass.core.errors import UserError

    def ask(question: str, default: str | None) -> str | None:
        if never:
            return default
        print(f"{question}{f' [{default}]' if default else ''}: ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            raise UserError(f"no answer to '{question}' (stdin closed); pass it as a flag, or --yes for the defaults")
        return line.strip() or default

    return ask


def check_output(path: Path, force: bool, ask: Callable[[str, str | None], str | None]) -> Path:
    """A private file: never inside the shipped YAML folders or the package; an existing one only with --force."""
    from agentcompass.core.catalog import shipped_root
    from agentcompass.core.errors import UserError

    resolved = path.resolve()
    root = shipped_root().resolve()
    package = Path(__file__).resolve().parent.parent
    shipped = [root / d for d in ("conf", "providers", "recipes", "harnesses")] + [package]
    if any(resolved.is_relative_to(d) for d in shipped):
        raise UserError(f"--output {path} is inside agentcompass's shipped config; write the private file elsewhere, "
                        f"e.g. {DEFAULT_OUTPUT}")
    if resolved.is_dir():
        raise UserError(f"--output {path} is a directory; pass a file name")
    if resolved.exists() and not force and (ask(f"{path} exists; overwrite it? (y/N)", "n") or "n").lower() not in ("y", "yes"):
        raise UserError(f"{path} exists; pass --force to overwrite it, or another --output")
    return resolved


def ensure_bucket(credentials: Any, project: str, bucket: str, region: str, create: bool | None,
                  ask: Callable[[str, str | None], str | None], ttl_days: int) -> bool:
    """True when the bucket exists (made now if the user agrees, with its lifecycle rule)."""
    from google.api_core import exceptions as gexc
    from google.cloud import storage

    from agentcompass.providers.gcp.storage import RunBucket

    client = storage.Client(project=project, credentials=credentials)
    try:
        client.get_bucket(bucket)
        print(f"✓ bucket gs://{bucket}")
        exists = True
    except gexc.NotFound:
        exists = False
    except gexc.GoogleAPICallError as exc:
        print(f"✗ bucket gs://{bucket}: {' '.join(str(exc).split())[:200]}")
        return False
    if not exists:
        if create is None:
            create = (ask(f"bucket gs://{bucket} does not exist; create it in {region}? (Y/n)", "y") or "y").lower() in ("y", "yes")
        if not create:
            print(f"✗ bucket gs://{bucket} does not exist")
            return False
    RunBucket(client, bucket, "setup").ensure(region, ttl_days)  # the lifecycle rule, on a new or an old bucket
    if not exists:
        print(f"✓ created gs://{bucket} in {region} (agentcompass/ objects deleted after {ttl_days} days)")
    return True


def write_config(path: Path, project: str, zone: str, region: str, bucket: str, credentials_file: str | None) -> None:
    """Atomically, readable by the owner only."""
    import yaml

    from agentcompass.core.results import write_atomic

    gcp: dict[str, Any] = {"project_id": project, "zone": zone, "region": region, "batch": {"bucket": bucket}}
    if credentials_file:
        gcp["credentials_file"] = str(Path(credentials_file).expanduser().resolve())
    text = ("# agentcompass: private settings for --env gcp, written by `agentcompass config gcp`.\n"
            "# Keep it out of version control; pass it with --config.\n" + yaml.safe_dump({"environments": {"gcp": gcp}},
                                                                                          sort_keys=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    old = os.umask(0o077)
    try:
        write_atomic(path, text)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
