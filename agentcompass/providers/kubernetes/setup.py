"""Kubernetes credentials and readiness: which credentials a run uses (the first found, in the order of the other
envs: a private --config file, then the environment's KUBECONFIG, then the client's own file, then the in-cluster
service account) and whether the cluster lets them do what a run does (`agentcompass env check kubernetes`,
through SelfSubjectAccessReview). Never prints or returns a secret's value in a message."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from agentcompass.core import secret_values
from agentcompass.core.errors import UserError
from agentcompass.core.readiness import Readiness
from agentcompass.providers.kubernetes.settings import KubernetesSettings
from agentcompass.providers.remote import one_line

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
SETUP_STEPS = (
    "point KUBECONFIG (or kubeconfig in the env settings) at a kubeconfig whose context reaches the cluster "
    "(`kubectl config get-contexts`), and name the context with --env-params '{\"context\": \"NAME\"}' if not the current one",
    "or put environments: {kubernetes: {api_server: URL, token: ${oc.env:MY_K8S_TOKEN}}} in a private file and pass --config FILE",
    "or run agentcompass inside the cluster, where the pod's service account is used",
)
# What a run does, as (verb, resource, subresource, group): create pods and exec into them, read them back,
# delete them (close, cleanup), and keep the namespace's no-egress NetworkPolicy.
RUN_VERBS = (
    ("create", "pods", "", ""), ("get", "pods", "", ""), ("list", "pods", "", ""), ("delete", "pods", "", ""),
    ("create", "pods", "exec", ""), ("get", "pods", "exec", ""),
)
POLICY_VERBS = (("get", "networkpolicies", "", "networking.k8s.io"), ("create", "networkpolicies", "", "networking.k8s.io"))


class Credentials(NamedTuple):
    kind: str  # token, kubeconfig, in-cluster
    source: str  # where they came from, for `env check`; never the values
    path: str | None = None


def kubeconfig_path(settings: KubernetesSettings) -> tuple[str | None, str]:
    """The kubeconfig to read and why: the setting, $KUBECONFIG (its first file), else ~/.kube/config."""
    if settings.kubeconfig:
        return os.path.expanduser(settings.kubeconfig), "kubeconfig in the env settings"
    if os.environ.get("KUBECONFIG"):
        return os.environ["KUBECONFIG"].split(os.pathsep)[0], "the KUBECONFIG environment variable"
    default = Path.home() / ".kube" / "config"
    return (str(default), str(default)) if default.is_file() else (None, "")


def credentials(settings: KubernetesSettings, config_source: str = "") -> Credentials | None:
    if settings.token:
        secret_values.register_tree([settings.token.get_secret_value()], under_secret=True)
        return Credentials("token", f"api_server and token in {config_source or 'the env settings'}")
    path, source = kubeconfig_path(settings)
    if path:
        if not Path(path).is_file():
            raise UserError(f"kubeconfig {path} (from {source}) does not exist; fix the path or unset it")
        return Credentials("kubeconfig", f"{path} (from {source})" + (f", context {settings.context}" if settings.context else ""), path)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and IN_CLUSTER_TOKEN.is_file():
        return Credentials("in-cluster", "this pod's service account (in-cluster)")
    return None


IN_CLUSTER_NAMESPACE = IN_CLUSTER_TOKEN.parent / "namespace"


def namespace_of(settings: KubernetesSettings, found: Credentials | None) -> tuple[str, str]:
    """The namespace and why: the setting, else the kubeconfig context's (as kubectl uses it), else the
    in-cluster pod's own, else `default`."""
    if settings.namespace:
        return settings.namespace, "namespace in the env settings"
    if found is not None and found.kind == "kubeconfig" and found.path:
        import yaml  # read here, not by the client: `list envs` imports no SDK

        try:
            data = yaml.safe_load(Path(found.path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            data = {}
        wanted = settings.context or (data.get("current-context") if isinstance(data, dict) else None)
        contexts = data.get("contexts") or [] if isinstance(data, dict) else []
        chosen = next((c for c in contexts if isinstance(c, dict) and c.get("name") == wanted), None)
        namespace = ((chosen or {}).get("context") or {}).get("namespace")
        if namespace:
            return str(namespace), f"context {(chosen or {}).get('name')} of the kubeconfig"
    if found is not None and found.kind == "in-cluster" and IN_CLUSTER_NAMESPACE.is_file():
        return IN_CLUSTER_NAMESPACE.read_text().strip(), "this pod's own namespace"
    return "default", "the default"


def resolved(settings: KubernetesSettings, config_source: str = "") -> KubernetesSettings:
    """The settings with the namespace filled in (namespace_of)."""
    if settings.namespace:
        return settings
    return settings.model_copy(update={"namespace": namespace_of(settings, credentials(settings, config_source))[0]})


def api_client(settings: KubernetesSettings, config_source: str = "") -> "ApiClient":
    """An ApiClient of its own (never the client library's global default), from the first credentials found."""
    from kubernetes import client, config

    found = credentials(settings, config_source)
    if found is None:
        raise UserError("no Kubernetes credentials: no api_server/token in a --config file, KUBECONFIG unset, no "
                        "~/.kube/config and not inside a cluster; " + SETUP_STEPS[0])
    configuration = client.Configuration()
    try:
        if found.kind == "token":
            assert settings.api_server and settings.token
            configuration.host = settings.api_server.rstrip("/")
            configuration.api_key = {"authorization": f"Bearer {settings.token.get_secret_value()}"}
            configuration.ssl_ca_cert = settings.ca_cert
        elif found.kind == "kubeconfig":
            config.load_kube_config(config_file=found.path, context=settings.context,
                                    client_configuration=configuration, persist_config=False)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        raise UserError(f"cannot use the Kubernetes credentials from {found.source} ({one_line(exc)[:200]}); "
                        "fix them, then `agentcompass env check kubernetes`") from exc
    secret_values.register_tree([v for v in (configuration.api_key or {}).values()], under_secret=True)
    return client.ApiClient(configuration)


def access_review(api: "ApiClient", namespace: str | None, verb: str, resource: str, subresource: str, group: str) -> bool:
    from kubernetes import client

    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(namespace=namespace, verb=verb, resource=resource,
                                                        subresource=subresource or None, group=group or None)))
    answer = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(answer.status and answer.status.allowed)


def kubernetes_readiness(settings: KubernetesSettings, live: bool, config_source: str = "") -> Readiness:
    """Which credentials and namespace a run would use and, when `live`, whether the cluster answers and
    lets them do each thing a run does (SelfSubjectAccessReview, one verb at a time)."""
    report = Readiness()
    if importlib.util.find_spec("kubernetes") is None:
        from agentcompass.core.install import pip_install

        return report.fail("the kubernetes client is not installed", pip_install("kubernetes"))
    try:
        found = credentials(settings, config_source)
    except UserError as exc:
        return report.fail(one_line(exc), *SETUP_STEPS)
    if found is None:
        return report.fail("credentials: none found (no api_server/token, KUBECONFIG unset, no ~/.kube/config, "
                           "not in a cluster)", *SETUP_STEPS)
    report.facts.append(f"credentials: {found.source}")
    namespace, why = namespace_of(settings, found)
    settings = settings.model_copy(update={"namespace": namespace})
    report.facts.append(f"namespace: {namespace} (from {why})")
    report.facts.append("no-internet tasks: " + ("a NetworkPolicy denying egress (the cluster enforces them, says "
                        "network_policies_enforced)" if settings.network_policies_enforced else
                        "refused (set network_policies_enforced: true once the cluster's network plugin enforces NetworkPolicies)"))
    if not live:
        return report
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        api = api_client(settings, config_source)
        with api:
            verbs = RUN_VERBS + (POLICY_VERBS if settings.network_policies_enforced else ())
            denied = [f"{verb} {resource}{'/' + sub if sub else ''}" for verb, resource, sub, group in verbs
                      if not access_review(api, settings.namespace, verb, resource, sub, group)]
    except UserError as exc:
        return report.fail(one_line(exc), *SETUP_STEPS)
    except ApiException as exc:
        return report.fail(f"the cluster refused the access review ({exc.status} {one_line(exc.reason)[:200]})",
                           "check the credentials, then run this again")
    except (HTTPError, OSError) as exc:
        return report.fail(f"cannot reach the cluster ({one_line(exc)[:200]})", "check the network and the API server address")
    if denied:
        return report.fail(f"RBAC: not allowed in namespace {settings.namespace}: {', '.join(denied)}",
                           f"grant them with a Role and RoleBinding in {settings.namespace} (docs/environments/kubernetes.md)")
    report.facts.append(f"RBAC: every verb a run needs is allowed in namespace {settings.namespace}")
    return report


def readiness_of_settings(settings: dict[str, Any], live: bool, config_source: str = "") -> Readiness:
    return kubernetes_readiness(KubernetesSettings(**settings), live, config_source)
