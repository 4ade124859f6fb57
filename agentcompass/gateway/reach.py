"""Where the gateway listens and how a run's sandboxes reach it, checked before the run.

The one place that decides the listening address: run.gateway.host when the user gives one; with a public URL
(a tunnel on modal or gcp) the address the tunnel connects to; else loopback, plus each sandbox's own address
to this host (docker: its network's gateway, or what the sandbox says with `host_address()`) once a sandbox
needs it (server.Gateway._listen). Never every interface unless the user asks for 0.0.0.0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agentcompass.core.errors import UserError
from agentcompass.gateway.listener import bindable

if TYPE_CHECKING:
    from agentcompass.core.schema import ResolvedConfig

LOOPBACK = "127.0.0.1"
WILDCARDS = ("0.0.0.0", "::")


def check_caps_priced(resolved: "ResolvedConfig") -> None:
    """A dollar cap needs the model's price: without one every call costs "unknown" and no cap would hold."""
    from agentcompass.core.models import tokens_price

    run, model = resolved.run, resolved.model
    dollars = [f"run.{name}" for name in ("max_cost_usd", "max_trial_cost_usd") if getattr(run, name) is not None]
    hourly = model.pricing is not None and model.pricing.hourly_usd is not None
    if dollars and not hourly and not tokens_price(model, 1000, 1000, 0)[1]:
        raise UserError(f"{' and '.join(dollars)} need the price of model '{model.name}', which neither the preset nor "
                        "litellm's price map gives; set model.pricing (input_per_mtok, output_per_mtok or hourly_usd) "
                        "or cap tokens instead (run.max_tokens, run.max_trial_tokens)")


def network_gateway(endpoint: dict[str, Any], network: Callable[[], dict[str, Any]]) -> str | None:
    """This host's IPv4 address on a container's network: the container's own endpoint says it (`Gateway`),
    on every engine; the network's IPAM lists it only where it was given (Debian's docker.io 20.10 lists
    none on the default bridge, nor on a network made with `--subnet` alone), so it is the fallback."""
    if "." in (endpoint.get("Gateway") or ""):
        return str(endpoint["Gateway"])
    config = network().get("IPAM", {}).get("Config") or []
    return next((str(c["Gateway"]) for c in config if "." in (c.get("Gateway") or "")), None)


def bind_host(resolved: "ResolvedConfig") -> str | None:
    """The address the gateway listens on from the start: run.gateway.host when given; with a public URL (a tunnel),
    the URL's own address when it is one of this machine's, else 127.0.0.1 (where tunnels such as `ssh -R` connect);
    else None: 127.0.0.1, and each sandbox's address to the host is added when a sandbox needs it."""
    settings = resolved.run.gateway
    if settings.host:
        return settings.host
    if settings.public_url:
        address = urlsplit(settings.public_url).hostname or ""
        return address if address and address[0].isdigit() and bindable(address) else "127.0.0.1"
    return None
