"""OS Login for the gcp env: whether the organisation enforces it (org policy compute.requireOsLogin), and
then the run's ephemeral key imported for the account (oslogin_v1 import_ssh_public_key), whose POSIX user
is the one SSH logs in as. With OS Login enforced, keys in instance metadata are ignored by the VM's guest,
so without this every VM boots and then refuses SSH until boot_timeout_s. The SDKs are imported inside."""

from __future__ import annotations

import time
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.providers.remote import one_line

CONSTRAINT = "compute.requireOsLogin"
KEY_TTL_S = 24 * 3600  # the imported key expires by itself a day later: nothing to clean up after a crash
ROLES = "roles/compute.osAdminLogin (or roles/compute.osLogin) for the account, and OS Login API enabled"


def os_login_enforced(credentials: Any, project: str) -> bool | None:
    """True when the effective org policy enforces OS Login on the project, False when not, None when it
    cannot be told (no org policy SDK, or no right to read policies)."""
    try:
        from google.api_core import exceptions as gexc
        from google.cloud import orgpolicy_v2
    except ImportError:
        return None
    try:
        policy = orgpolicy_v2.OrgPolicyClient(credentials=credentials).get_effective_policy(
            name=f"projects/{project}/policies/{CONSTRAINT}")
    except gexc.GoogleAPICallError:
        return None
    return any(rule.enforce for rule in policy.spec.rules)


def account_of(credentials: Any, configured: str | None) -> str:
    """The account whose OS Login profile gets the key: os_login_account, else the service account's e-mail."""
    account = configured or getattr(credentials, "service_account_email", None)
    if not account or account == "default":
        raise UserError("OS Login is enforced for the project and the credentials name no account: set "
                        "environments.gcp.os_login_account to the e-mail of the account the run uses")
    return str(account)


def import_key(credentials: Any, project: str, account: str, public_line: str) -> str:
    """Import the run's public key into the account's OS Login profile; returns the POSIX user to log in as."""
    from google.api_core import exceptions as gexc
    from google.cloud import oslogin_v1

    key = oslogin_v1.common.SshPublicKey(key=public_line, expiration_time_usec=int((time.time() + KEY_TTL_S) * 1e6))
    try:
        response = oslogin_v1.OsLoginServiceClient(credentials=credentials).import_ssh_public_key(
            request=oslogin_v1.ImportSshPublicKeyRequest(parent=f"users/{account}", ssh_public_key=key, project_id=project))
    except gexc.GoogleAPICallError as exc:
        raise UserError(f"OS Login refused the run's SSH key for {account} ({one_line(exc)[:200]}); needs {ROLES}") from exc
    accounts = list(response.login_profile.posix_accounts)
    primary = next((a for a in accounts if a.primary), accounts[0] if accounts else None)
    if primary is None or not primary.username:
        raise UserError(f"OS Login gave {account} no POSIX account; needs {ROLES}")
    return str(primary.username)
