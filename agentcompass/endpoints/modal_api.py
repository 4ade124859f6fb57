"""Modal Endpoints through the modal SDK's own client: the calls `modal endpoint list/create/info/stop` make.

The SDK (1.6) has no Python API for Endpoints, only its CLI; the CLI builds these protobuf requests and sends them on
the client's gRPC stub, and so do we (the same requests, the same server, the SDK's own authentication and retries),
so a preset can be brought up, found again and stopped without scraping the CLI's tables.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from agentcompass.core.errors import UserError

if TYPE_CHECKING:
    from agentcompass.core.schema import ModalEndpoint
    from agentcompass.providers.modal.setup import ModalCredentials

STATUS_NAMES = {  # EndpointGetInfoResponse.EndpointStatus, as people say them
    0: "unknown", 1: "provisioning", 2: "live", 3: "failed", 4: "cancelling", 5: "cancelled", 6: "stopped"}
ENDED = ("failed", "cancelling", "cancelled", "stopped")
ROUTING_REGION = "us-west"  # the CLI's default routing region (modal 1.6)


@dataclass(frozen=True)
class EndpointState:
    name: str
    endpoint_id: str
    status: str  # one of STATUS_NAMES' values
    url: str  # the service URL (OpenAI-compatible under /v1); empty until Modal gives one
    app_id: str  # the app Modal bills the endpoint's containers to
    requires_proxy_auth: bool
    model_name: str  # what requests name as "model"

    @property
    def live(self) -> bool:
        return self.status == "live" and bool(self.url)

    @property
    def base_url(self) -> str:
        return self.url.rstrip("/") + "/v1"


class ModalEndpoints:
    """One connection to Modal for the endpoint calls of a command."""

    def __init__(self, credentials: "ModalCredentials", environment: str | None) -> None:
        from agentcompass.providers.modal.setup import import_modal

        import_modal(credentials)  # the SDK configured as our credentials need (see its docstring)
        self.credentials = credentials
        self.environment = environment or credentials.environment or ""

    def run(self, work: Callable[..., Any], *args: Any) -> Any:
        from modal.exception import AuthError, Error

        async def connected() -> Any:
            from modal.client import _Client

            client = await _Client.from_credentials(self.credentials.token_id, self.credentials.token_secret)
            try:
                return await work(client, *args)
            finally:
                await client.close()
        try:
            return asyncio.run(connected())
        except AuthError as exc:
            raise UserError(f"Modal rejected the credentials ({exc}); check them with `agentcompass env check modal`") from None
        except (Error, OSError) as exc:
            raise UserError(f"Modal's endpoint API failed ({type(exc).__name__}: {exc}); check the network and "
                            "`agentcompass env check modal`") from None

    def find(self, name: str) -> EndpointState | None:
        """The endpoint of that name that is not stopped, or None."""
        return self.run(self._find, name)

    async def _find(self, client: Any, name: str) -> EndpointState | None:
        from modal_proto import api_pb2

        found = await client._stub.EndpointGetByName(
            api_pb2.EndpointGetByNameRequest(name=name, environment_name=self.environment))
        if not found.endpoint_id:
            return None
        state = await self._info(client, found.endpoint_id)
        return None if state.status == "stopped" else state

    async def _info(self, client: Any, endpoint_id: str) -> EndpointState:
        from modal_proto import api_pb2

        reply = await client._stub.EndpointGetInfo(api_pb2.EndpointGetInfoRequest(endpoint_id=endpoint_id))
        info = reply.info
        return EndpointState(info.name, endpoint_id, STATUS_NAMES.get(info.status, "unknown"), info.service_url,
                             reply.metadata.app_id, info.requires_proxy_auth, info.model_name)

    def create(self, spec: "ModalEndpoint") -> str:
        """A new dedicated endpoint for the spec (the weights from its volume when it names one); its id."""
        return self.run(self._create, spec)

    async def _create(self, client: Any, spec: "ModalEndpoint") -> str:
        from modal_proto import api_pb2

        if spec.volume:
            from modal.exception import NotFoundError
            from modal.volume import _Volume

            try:
                volume = await _Volume.from_name(spec.volume, environment_name=self.environment or None).hydrate(client)
            except NotFoundError:
                raise UserError(f"endpoint {spec.name}: the Modal volume '{spec.volume}' does not exist; upload the "
                                "weights to it first, or drop endpoint.modal.volume to have Modal fetch them") from None
            source = api_pb2.EndpointModelSource(custom=api_pb2.EndpointCustomModelSource(
                base_model_repo_id=spec.model,
                modal_volume=api_pb2.EndpointModalVolumeModelSource(volume_id=volume.object_id, model_path=spec.volume_path)))
        else:
            source = api_pb2.EndpointModelSource(base_model_repo_id=spec.model)
        compute = api_pb2.EndpointComputeRegionSpec()
        compute.auto.SetInParent()
        request = api_pb2.EndpointCreateRequest(
            name=spec.name, proxy_regions=[ROUTING_REGION], compute_region=compute, model=source,
            environment_name=self.environment, unauthenticated=spec.unauthenticated,
            serving_mode=api_pb2.ENDPOINT_SERVING_MODE_DEDICATED)
        scaling = api_pb2.AutoscalerSettings(min_containers=spec.min_containers, max_containers=spec.max_containers,
                                             scaledown_window=spec.scaledown_window_s)
        if scaling.ListFields():
            request.autoscaler_settings.CopyFrom(scaling)
        return (await client._stub.EndpointCreate(request)).endpoint_id

    def wait_live(self, endpoint_id: str, timeout_s: float, poll_s: float,
                  progress: Callable[[EndpointState, float], None]) -> EndpointState:
        """Poll until the endpoint is live (or has ended, or timeout_s passed); `progress` hears every status."""
        return self.run(self._wait_live, endpoint_id, timeout_s, poll_s, progress)

    async def _wait_live(self, client: Any, endpoint_id: str, timeout_s: float, poll_s: float,
                         progress: Callable[[EndpointState, float], None]) -> EndpointState:
        started = time.monotonic()
        while True:
            state = await self._info(client, endpoint_id)
            waited = time.monotonic() - started
            progress(state, waited)
            if state.live or state.status in ENDED or waited >= timeout_s:
                return state
            await asyncio.sleep(min(poll_s, max(0.0, timeout_s - waited)))

    def stop(self, endpoint_id: str) -> None:
        self.run(self._stop, endpoint_id)

    async def _stop(self, client: Any, endpoint_id: str) -> None:
        from modal_proto import api_pb2

        await client._stub.EndpointStop(api_pb2.EndpointStopRequest(
            endpoint_id=endpoint_id, source=api_pb2.ENDPOINT_STOP_SOURCE_CLI))
