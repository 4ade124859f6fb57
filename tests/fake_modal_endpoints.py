"""A stand-in for Modal's API server, for the Endpoints calls: a real gRPC server (grpclib, as Modal's own client
speaks it) answering the modal SDK's protobuf requests, so `agentcompass endpoint` runs the SDK's real client code
against it (MODAL_SERVER_URL points the SDK here).

Strict where the service is: tokens must match (else UNAUTHENTICATED, which the SDK raises as AuthError); a name is
taken while an endpoint of that name is not stopped (ALREADY_EXISTS); a custom volume must exist (NOT_FOUND, as
`Volume.from_name` sees it) and its model source must name the base model; requests must carry a routing region and
the dedicated serving mode. A new endpoint is PROVISIONING for `provision_polls` info calls, then LIVE at
`service_url` (or FAILED when `fail` is set). Every request is kept in `requests`, as (method, message).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from grpclib import GRPCError, Status
from modal_proto import api_grpc, api_pb2

TOKEN_ID, TOKEN_SECRET = "ak-fake-endpoints", "as-fake-endpoints-secret"
Info = api_pb2.EndpointGetInfoResponse


@dataclass
class Endpoint:
    endpoint_id: str
    name: str
    environment: str
    request: Any
    polls_left: int
    status: int = Info.ENDPOINT_STATUS_PROVISIONING
    app_id: str = ""


@dataclass
class FakeModal:
    service_url: str = "https://fake-endpoint.modal.run"
    provision_polls: int = 2
    fail: bool = False
    volumes: dict[str, str] = field(default_factory=dict)  # name -> id
    endpoints: list[Endpoint] = field(default_factory=list)
    requests: list[tuple[str, Any]] = field(default_factory=list)
    ids: Any = field(default_factory=lambda: itertools.count(1))

    def active(self, name: str, environment: str) -> Endpoint | None:
        return next((e for e in reversed(self.endpoints) if e.name == name and e.environment == environment
                     and e.status != Info.ENDPOINT_STATUS_STOPPED), None)

    def by_id(self, endpoint_id: str) -> Endpoint:
        for endpoint in self.endpoints:
            if endpoint.endpoint_id == endpoint_id:
                return endpoint
        raise GRPCError(Status.NOT_FOUND, f"Endpoint '{endpoint_id}' not found")

    def created(self, method: str) -> list[Any]:
        return [message for name, message in self.requests if name == method]


def servicer(fake: FakeModal) -> Any:
    class Servicer(api_grpc.ModalClientBase):
        async def _take(self, stream: Any, method: str) -> Any:
            metadata = dict(stream.metadata)
            if (metadata.get("x-modal-token-id"), metadata.get("x-modal-token-secret")) != (TOKEN_ID, TOKEN_SECRET):
                raise GRPCError(Status.UNAUTHENTICATED, "Token ID or secret is incorrect")
            message = await stream.recv_message()
            fake.requests.append((method, message))
            return message

        async def VolumeGetOrCreate(self, stream: Any) -> None:
            request = await self._take(stream, "VolumeGetOrCreate")
            if request.deployment_name not in fake.volumes:
                raise GRPCError(Status.NOT_FOUND, f"Volume '{request.deployment_name}' not found")
            await stream.send_message(api_pb2.VolumeGetOrCreateResponse(volume_id=fake.volumes[request.deployment_name]))

        async def EndpointGetByName(self, stream: Any) -> None:
            request = await self._take(stream, "EndpointGetByName")
            found = next((e for e in reversed(fake.endpoints) if e.name == request.name
                          and e.environment == request.environment_name), None)
            await stream.send_message(api_pb2.EndpointGetByNameResponse(
                endpoint_id=found.endpoint_id if found else "", environment_name=request.environment_name))

        async def EndpointCreate(self, stream: Any) -> None:
            request = await self._take(stream, "EndpointCreate")
            if not request.proxy_regions or request.serving_mode != api_pb2.ENDPOINT_SERVING_MODE_DEDICATED:
                raise GRPCError(Status.INVALID_ARGUMENT, "a dedicated endpoint needs a routing region")
            source = request.model
            base = source.custom.base_model_repo_id if source.HasField("custom") else source.base_model_repo_id
            if not base:
                raise GRPCError(Status.INVALID_ARGUMENT, "model source names no base model")
            if source.HasField("custom") and source.custom.modal_volume.volume_id not in fake.volumes.values():
                raise GRPCError(Status.NOT_FOUND, "volume not found")
            if fake.active(request.name, request.environment_name):
                raise GRPCError(Status.ALREADY_EXISTS, f"Endpoint '{request.name}' already exists")
            number = next(fake.ids)
            endpoint = Endpoint(f"ep-{number:06d}", request.name, request.environment_name, request,
                                fake.provision_polls, app_id=f"ap-{number:06d}")
            fake.endpoints.append(endpoint)
            await stream.send_message(api_pb2.EndpointCreateResponse(
                endpoint_id=endpoint.endpoint_id, name=endpoint.name, model_name=base))

        async def EndpointGetInfo(self, stream: Any) -> None:
            request = await self._take(stream, "EndpointGetInfo")
            endpoint = fake.by_id(request.endpoint_id)
            if endpoint.status == Info.ENDPOINT_STATUS_PROVISIONING:
                if endpoint.polls_left <= 0:
                    endpoint.status = Info.ENDPOINT_STATUS_FAILED if fake.fail else Info.ENDPOINT_STATUS_LIVE
                endpoint.polls_left -= 1
            live = endpoint.status == Info.ENDPOINT_STATUS_LIVE
            source = endpoint.request.model
            await stream.send_message(Info(
                info=Info.EndpointInfoSummary(
                    name=endpoint.name, status=endpoint.status, service_url=fake.service_url if live else "",
                    requires_proxy_auth=not endpoint.request.unauthenticated,
                    serving_mode=api_pb2.ENDPOINT_SERVING_MODE_DEDICATED,
                    model_name=source.custom.base_model_repo_id or source.base_model_repo_id),
                metadata=Info.EndpointHandleMetadata(app_id=endpoint.app_id, server_id="srv-1" if live else "",
                                                     environment_name=endpoint.environment)))

        async def EndpointStop(self, stream: Any) -> None:
            request = await self._take(stream, "EndpointStop")
            fake.by_id(request.endpoint_id).status = Info.ENDPOINT_STATUS_STOPPED
            await stream.send_message(api_pb2.EndpointStopResponse())

    Servicer.__abstractmethods__ = frozenset()  # the calls not answered here are not the SDK's for endpoints
    return Servicer()


def serve(fake: FakeModal) -> tuple[str, Any]:
    """Start the server on a free loopback port in a thread; (its URL for MODAL_SERVER_URL, a stop function)."""
    from grpclib.server import Server

    ready: list[Any] = []
    loop = asyncio.new_event_loop()

    def run() -> None:
        asyncio.set_event_loop(loop)
        server = Server([servicer(fake)])
        loop.run_until_complete(server.start("127.0.0.1", 0))
        ready.append((server, server._server.sockets[0].getsockname()[1]))
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while not ready:
        thread.join(0.01)
    server, port = ready[0]

    def stop() -> None:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    return f"http://127.0.0.1:{port}", stop
