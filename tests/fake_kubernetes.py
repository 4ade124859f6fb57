"""A fake Kubernetes API server: a real HTTP server (aiohttp, in a thread) answering the calls the kubernetes
provider makes as the real API server does, with each pod a real docker container of its image.

Strict as the real one: a bearer token or 401; one namespace (others 404); every request body deserialized into
the client's own model (V1Pod, V1NetworkPolicy, V1SelfSubjectAccessReview) and serialized back, so a field the
model does not know, a missing required field or a wrong shape is 422 Invalid; names are DNS-1123 (pods: a
subdomain; containers: a label), label keys and values in their alphabets, quantities parsed; a ResourceQuota on
pod count and limits.cpu answers 403 "exceeded quota" (and refuses a pod without cpu limits, as the quota
admission does). Pods start as Pending; `schedulable=False` keeps them Pending and Unschedulable. A pod whose
image is not on the docker engine waits in ImagePullBackOff. A NetworkPolicy of policy type Egress selecting the
pod's labels when it starts runs its container with no network at all (a real CNI's deny-all is the same to the
pod); one whose egress rules allow only an ipBlock puts it on an internal docker network whose gateway (this host)
is that block (`egress_gateway()`: what a CNI allowing one address gives). Exec is the websocket of pods/exec with the v4.channel.k8s.io framing (channel byte first: 0 stdin, 1
stdout, 2 stderr, 3 a v1 Status with the exit code as a cause), the command run by `docker exec -i` in the pod's
container. Every request is recorded in `requests` (method, path with query, body) for the tests to read.

Longer than 400 lines because one fake of one API: pods, their containers, exec streams, policies and the quota share one state.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

PROTOCOL = "v4.channel.k8s.io"
BODY = web.RequestKey("body", object)
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUANTITY = re.compile(r"^([0-9]+(\.[0-9]+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3, None: 1}


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details or {}, "code": code}
    return web.json_response(body, status=code)


def quantity(text: str) -> float:
    match = QUANTITY.match(str(text))
    if not match:
        raise ValueError(f"quantities must match the regular expression '{QUANTITY.pattern}'")
    return float(match.group(1)) * BINARY[match.group(3)]


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Invalid(Exception):
    pass


def as_model(body: Any, model: str) -> Any:
    """The body as the client's model; Invalid unless it round-trips unchanged (no unknown or misshapen field)."""
    from kubernetes import client

    api = client.ApiClient()
    try:
        obj = api._ApiClient__deserialize(body, model)  # the client's own deserializer, validation on
    except (ValueError, TypeError, AttributeError) as exc:
        raise Invalid(f"{model}: {exc}") from exc
    again = api.sanitize_for_serialization(obj)
    if again != body:
        raise Invalid(f"{model}: fields the API does not know or of the wrong shape: {json.dumps(body)[:300]} "
                      f"reads as {json.dumps(again)[:300]}")
    return obj


def check_labels(labels: dict[str, str] | None) -> None:
    for key, value in (labels or {}).items():
        prefix, _, name = key.rpartition("/")
        if (prefix and (len(prefix) > 253 or not SUBDOMAIN.match(prefix))) or len(name) > 63 or not LABEL_NAME.match(name):
            raise Invalid(f"metadata.labels: Invalid value: {key!r}: a valid label key")
        if len(value) > 63 or (value and not LABEL_NAME.match(value)):
            raise Invalid(f"metadata.labels: Invalid value: {value!r}: a valid label must be an empty string or "
                          "consist of alphanumeric characters, '-', '_' or '.', at most 63")


def selected(selector: dict[str, str] | None, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (selector or {}).items())


class FakeCluster:
    def __init__(self, namespace: str = "agentcompass-test", *, quota_pods: int | None = None,
                 quota_cpu: float | None = None, schedulable: bool = True, denied: tuple[str, ...] = (),
                 protocols: tuple[str, ...] = (PROTOCOL,)) -> None:
        self.namespace = namespace
        self.token = f"fake-{uuid.uuid4().hex}"
        self.quota_pods, self.quota_cpu, self.schedulable = quota_pods, quota_cpu, schedulable
        self.protocols = protocols  # what the exec websocket accepts; v5 adds only stdin's close, which we never send
        self.denied = set(denied)  # "verb resource[/sub]" the access reviews refuse
        self.pods: dict[str, dict[str, Any]] = {}
        self.containers: dict[str, str] = {}  # pod name -> docker container
        self.policies: dict[str, dict[str, Any]] = {}
        self.requests: list[dict[str, Any]] = []
        self.exec_argv: list[list[str]] = []
        self.exec_protocols: list[str | None] = []
        self.tag = f"agentcompass-fakek8s-{uuid.uuid4().hex[:8]}"
        self.lock = threading.Lock()
        self.url = ""
        self.network: str | None = None  # the internal network of pods allowed one address (egress_gateway)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> "FakeCluster":
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application(middlewares=[self._middleware], client_max_size=1 << 30)
            ns = "/api/v1/namespaces/{ns}"
            app.router.add_post(ns + "/pods", self.create_pod)
            app.router.add_get(ns + "/pods", self.list_pods)
            app.router.add_get(ns + "/pods/{name}", self.read_pod)
            app.router.add_delete(ns + "/pods/{name}", self.delete_pod)
            app.router.add_route("*", ns + "/pods/{name}/exec", self.exec)
            policies = "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
            app.router.add_post(policies, self.create_policy)
            app.router.add_get(policies + "/{name}", self.read_policy)
            app.router.add_post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", self.review)
            self._runner = web.AppRunner(app)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.url = f"http://127.0.0.1:{port}"
            ready.set()
            loop.run_forever()

        threading.Thread(target=serve, name="fake-kubernetes", daemon=True).start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        for container in list(self.containers.values()):
            subprocess.run(["docker", "rm", "-f", container], capture_output=True)
        self.containers.clear()
        if self._loop and self._runner:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self.network:
            subprocess.run(["docker", "network", "rm", self.network], capture_output=True)

    def egress_gateway(self) -> str:
        """This host's address on an internal docker network: the one address a policy's ipBlock may allow."""
        if self.network is None:
            self.network = self.tag
            subprocess.run(["docker", "network", "create", "--internal", "--label", self.tag, self.network],
                           capture_output=True, check=True)
        inspect = subprocess.run(["docker", "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", self.network],
                                 capture_output=True, text=True, check=True)
        return inspect.stdout.strip()

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": self.namespace}}],
        }), encoding="utf-8")
        return path

    # -- the server's checks -------------------------------------------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = None
        if request.can_read_body:
            try:
                body = await request.json()
            except json.JSONDecodeError:
                return status(400, "BadRequest", "the body is not JSON")
        request[BODY] = body
        self.requests.append({"method": request.method, "path": request.path_qs, "body": body})
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return status(401, "Unauthorized", "Unauthorized")
        ns = request.match_info.get("ns")
        if ns is not None and ns != self.namespace:
            return status(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"})
        try:
            return await handler(request)
        except Invalid as exc:
            return status(422, "Invalid", str(exc))

    # -- pods --------------------------------------------------------------------------------
    async def create_pod(self, request: web.Request) -> web.Response:
        body = request[BODY]
        pod = as_model(body, "V1Pod")
        name = pod.metadata.name or ""
        if len(name) > 253 or not SUBDOMAIN.match(name):
            raise Invalid(f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain")
        check_labels(pod.metadata.labels)
        if not pod.spec or not pod.spec.containers:
            raise Invalid("spec.containers: Required value")
        cpu = 0.0
        for container in pod.spec.containers:
            if not LABEL.match(container.name) or len(container.name) > 63:
                raise Invalid(f"spec.containers.name: Invalid value: {container.name!r}: a DNS-1123 label")
            if not container.image:
                raise Invalid("spec.containers.image: Required value")
            resources = container.resources
            for kind in ("limits", "requests"):
                for value in (getattr(resources, kind, None) or {}).values():
                    if not QUANTITY.match(str(value)):
                        raise Invalid(f"spec.containers.resources.{kind}: Invalid value: {value!r}")
            limits, requests = (resources.limits or {}) if resources else {}, (resources.requests or {}) if resources else {}
            for key, limit in limits.items():
                if key in requests and quantity(requests[key]) > quantity(limit):
                    raise Invalid(f"spec.containers.resources.requests: Invalid value: must be less than or equal to {key} limit")
            if self.quota_cpu is not None and "cpu" not in limits:
                return status(403, "Forbidden", f'pods "{name}" is forbidden: failed quota: agentcompass-quota: must specify limits.cpu for: {container.name}')
            cpu += quantity(limits.get("cpu", "0"))
        with self.lock:
            if name in self.pods:
                return status(409, "AlreadyExists", f'pods "{name}" already exists', {"name": name, "kind": "pods"})
            used = len(self.pods)
            used_cpu = sum(p["_cpu"] for p in self.pods.values())
            if self.quota_pods is not None and used + 1 > self.quota_pods:
                return status(403, "Forbidden", f'pods "{name}" is forbidden: exceeded quota: agentcompass-quota, '
                              f"requested: pods=1, used: pods={used}, limited: pods={self.quota_pods}")
            if self.quota_cpu is not None and used_cpu + cpu > self.quota_cpu:
                return status(403, "Forbidden", f'pods "{name}" is forbidden: exceeded quota: agentcompass-quota, '
                              f"requested: limits.cpu={cpu}, used: limits.cpu={used_cpu}, limited: limits.cpu={self.quota_cpu}")
            stored = dict(body)
            stored["metadata"] = {**body["metadata"], "namespace": self.namespace, "uid": str(uuid.uuid4()),
                                  "creationTimestamp": now(), "resourceVersion": "1"}
            stored["status"] = {"phase": "Pending", "conditions": [] if self.schedulable else [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/1 nodes are available: 1 Insufficient cpu."}]}
            stored["_cpu"] = cpu
            self.pods[name] = stored
        if self.schedulable:
            threading.Thread(target=self._start_container, args=(name,), daemon=True).start()
        return web.json_response(self._public(stored), status=201)

    def _public(self, pod: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in pod.items() if not k.startswith("_")}

    def _start_container(self, name: str) -> None:
        with self.lock:
            pod = self.pods.get(name)
        if pod is None:
            return
        spec = pod["spec"]
        main = spec["containers"][0]
        image = main["image"]
        waiting = None
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
            waiting = {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
        container = f"{self.tag}-{name}"[:120]
        if waiting is None:
            labels = pod["metadata"].get("labels") or {}
            egress = [p["spec"] for p in self.policies.values() if "Egress" in (p["spec"].get("policyTypes") or [])
                      and selected(p["spec"]["podSelector"].get("matchLabels"), labels)]
            network = "bridge"
            if egress:
                allowed = [peer.get("ipBlock", {}).get("cidr") for spec in egress for rule in spec.get("egress") or []
                           for peer in rule.get("to") or []]
                gateway = self.egress_gateway() if allowed and self.network else None
                network = self.network if gateway and allowed == [f"{gateway}/32"] else "none"
            argv = ["docker", "run", "-d", "--name", container, "--label", self.tag, "--network", network]
            limits = (main.get("resources") or {}).get("limits") or {}
            if "cpu" in limits:
                argv += ["--cpus", str(quantity(limits["cpu"]))]
            if "memory" in limits:
                argv += ["--memory", str(int(quantity(limits["memory"])))]
            if main.get("workingDir"):
                argv += ["-w", main["workingDir"]]
            with tempfile.NamedTemporaryFile("w", suffix=".env", delete=False) as env_file:
                env_file.write("".join(f"{e['name']}={e.get('value', '')}\n" for e in main.get("env") or []))
            argv += ["--env-file", env_file.name]
            for alias in spec.get("hostAliases") or []:
                argv += [f"--add-host={host}:{alias['ip']}" for host in alias["hostnames"]]
            command, args = main.get("command"), main.get("args") or []
            if command:
                argv += ["--entrypoint", command[0], image, *command[1:], *args]
            else:
                argv += [image, *args]
            started = subprocess.run(argv, capture_output=True, text=True)
            Path(env_file.name).unlink()
            if started.returncode != 0:
                waiting = {"reason": "RunContainerError", "message": started.stderr[-300:]}
            else:
                with self.lock:
                    self.containers[name] = container
                for n, extra in enumerate(spec["containers"][1:]):
                    side = [*(["--entrypoint", extra["command"][0]] if extra.get("command") else []), extra["image"],
                            *(extra.get("command") or [])[1:], *(extra.get("args") or [])]
                    subprocess.run(["docker", "run", "-d", "--name", f"{container}-{n}", "--label", self.tag,
                                    "--network", f"container:{container}", *side], capture_output=True)
        with self.lock:
            if name not in self.pods:  # deleted while starting
                subprocess.run(["docker", "rm", "-f", container], capture_output=True)
                return
            state = {"waiting": waiting} if waiting else {"running": {"startedAt": now()}}
            self.pods[name]["status"] = {
                "phase": "Pending" if waiting else "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": "", "ready": not waiting,
                                       "restartCount": 0, "state": state} for c in spec["containers"]]}

    def _refreshed(self, name: str) -> dict[str, Any] | None:
        """The pod, Failed once its container no longer runs (killed, OOM, removed), as the kubelet reports it."""
        with self.lock:
            pod = self.pods.get(name)
            container = self.containers.get(name)
        if pod is not None and container is not None and pod["status"].get("phase") == "Running":
            running = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", container],
                                     capture_output=True, text=True).stdout.strip()
            if running != "true":
                pod["status"]["phase"] = "Failed"
                pod["status"]["reason"] = "Error"
                for entry in pod["status"].get("containerStatuses") or []:
                    entry["state"] = {"terminated": {"exitCode": 137, "reason": "Error"}}
        return pod

    async def list_pods(self, request: web.Request) -> web.Response:
        wanted = dict(part.split("=", 1) for part in request.query.get("labelSelector", "").split(",") if part)
        with self.lock:
            items = [self._public(p) for p in self.pods.values() if selected(wanted, p["metadata"].get("labels") or {})]
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})

    async def read_pod(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        pod = self._refreshed(name)
        if pod is None:
            return status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        return web.json_response(self._public(pod))

    async def delete_pod(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        with self.lock:
            pod = self.pods.pop(name, None)
            container = self.containers.pop(name, None)
        if pod is None:
            return status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        if container:
            await asyncio.get_running_loop().run_in_executor(None, lambda: subprocess.run(
                ["docker", "rm", "-f", container] + [f"{container}-{n}" for n in range(len(pod["spec"]["containers"]) - 1)],
                capture_output=True))
        pod["metadata"]["deletionTimestamp"] = now()
        return web.json_response(self._public(pod))

    # -- exec ------------------------------------------------------------------------------------
    async def exec(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        query = request.query
        argv = query.getall("command", [])
        pod = self._refreshed(name)
        container = self.containers.get(name)
        if pod is None:
            return status(404, "NotFound", f'pods "{name}" not found')
        names = [c["name"] for c in pod["spec"]["containers"]]
        wanted = query.get("container") or (names[0] if len(names) == 1 else None)
        if wanted is None:
            return status(400, "BadRequest", f"a container name must be specified for pod {name}, choose one of: {names}")
        if wanted not in names:
            return status(400, "BadRequest", f"container {wanted} is not valid for pod {name}")
        if container is None or pod["status"].get("phase") != "Running":
            return status(400, "BadRequest", f"pod {name} is not running")
        if not argv or query.get("tty") == "true":
            return status(400, "BadRequest", "you must specify at least 1 command (and no tty here)")
        ws = web.WebSocketResponse(protocols=self.protocols)
        if not ws.can_prepare(request).ok:
            return status(400, "BadRequest", "exec needs a websocket upgrade with a channel.k8s.io protocol")
        await ws.prepare(request)
        if ws.ws_protocol not in self.protocols:
            await ws.close()
            return ws
        self.exec_argv.append(argv)
        self.exec_protocols.append(ws.ws_protocol)
        process = await asyncio.create_subprocess_exec(
            "docker", "exec", "-i", container, *argv, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

        async def pump(stream: asyncio.StreamReader, channel: int) -> None:
            while chunk := await stream.read(32768):
                await ws.send_bytes(bytes([channel]) + chunk)

        async def feed() -> None:
            async for message in ws:
                if message.type == WSMsgType.BINARY and message.data[:2] == b"\xff\x00" and process.stdin:
                    process.stdin.close()  # v5: the client closed stdin
                elif message.type == WSMsgType.BINARY and message.data[:1] == b"\x00" and process.stdin:
                    try:
                        process.stdin.write(message.data[1:])
                        await process.stdin.drain()
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                elif message.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
                    break

        feeder = asyncio.create_task(feed())
        outputs = asyncio.gather(pump(process.stdout, 1), pump(process.stderr, 2))  # type: ignore[arg-type]
        done, _ = await asyncio.wait({feeder, outputs}, return_when=asyncio.FIRST_COMPLETED)
        if feeder in done and not outputs.done():  # the client went away: the stream ends, not the command
            process.kill()
            await process.wait()
            return ws
        code = await process.wait()
        gone = (self._refreshed(name) or {}).get("status", {}).get("phase") != "Running"
        if gone:
            body = {"metadata": {}, "status": "Failure", "message": "container not found", "reason": "InternalError"}
        elif code == 0:
            body = {"metadata": {}, "status": "Success"}
        else:
            body = {"metadata": {}, "status": "Failure", "message": f"command terminated with non-zero exit code: {code}",
                    "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
        try:
            await ws.send_bytes(b"\x03" + json.dumps(body).encode())
            await ws.close()
        except ConnectionResetError:
            pass
        feeder.cancel()
        return ws

    # -- policies and reviews ----------------------------------------------------------------------
    async def create_policy(self, request: web.Request) -> web.Response:
        body = request[BODY]
        policy = as_model(body, "V1NetworkPolicy")
        name = policy.metadata.name or ""
        if not SUBDOMAIN.match(name):
            raise Invalid(f"metadata.name: Invalid value: {name!r}")
        check_labels(policy.metadata.labels)
        with self.lock:
            if name in self.policies:
                return status(409, "AlreadyExists", f'networkpolicies.networking.k8s.io "{name}" already exists')
            self.policies[name] = body
        return web.json_response(body, status=201)

    async def read_policy(self, request: web.Request) -> web.Response:
        policy = self.policies.get(request.match_info["name"])
        if policy is None:
            return status(404, "NotFound", "networkpolicy not found")
        return web.json_response(policy)

    async def review(self, request: web.Request) -> web.Response:
        body = request[BODY]
        as_model(body, "V1SelfSubjectAccessReview")
        attributes = body["spec"]["resourceAttributes"]
        what = f"{attributes['verb']} {attributes['resource']}" + (f"/{attributes['subresource']}" if attributes.get("subresource") else "")
        allowed = attributes.get("namespace") == self.namespace and what not in self.denied
        return web.json_response({**body, "status": {"allowed": allowed}}, status=201)
