"""Attacks on the local (bubblewrap) sandbox that must fail, and the honest controls beside them that must
still pass: the host's Unix sockets (the Docker engine's above all), abstract sockets, the host's loopback,
a benchmark's hidden tests and solutions, the results and the cache, a task's secrets in the process list
(docs/security.md, "Local (bubblewrap)")."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentcompass.core.errors import UserError
from agentcompass.core.sandbox import SandboxSpec
from agentcompass.providers.local import network
from agentcompass.providers.local.procs import REAPER
from agentcompass.providers.local.provider import LocalProvider
from agentcompass.providers.remote import EXEC_MARK
from harbor_factory import add_toml, make_recipe, make_task
from local_sandbox import HAS_BWRAP, HAS_PASTA, server_in_own_network_namespace

pytestmark = pytest.mark.skipif(not HAS_BWRAP or not HAS_PASTA, reason="bubblewrap or pasta (passt) not installed")

CONNECT_UNIX = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1].replace("@", "\\0", 1))
s.sendall(b"GET /version HTTP/1.0\\r\\nHost: docker\\r\\n\\r\\n")
print("ANSWERED", s.recv(200))
"""
HTTP_GET = "python3 -c \"import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\" {}"


@pytest.fixture
def boxes(tmp_path) -> Iterator:
    """open(allow_internet) -> a bwrap sandbox, closed at the end."""
    provider = LocalProvider(isolation="bwrap", root=str(tmp_path / "ws"))
    opened = []

    def open_box(allow_internet: bool, **spec):
        box = provider.open(SandboxSpec(name="attack", workdir="/app", allow_internet=allow_internet, **spec))
        opened.append(box)
        return box
    yield open_box
    for box in opened:
        box.close()


@contextmanager
def http_server(host: str, body: str) -> Iterator[int]:
    """A host HTTP server that answers every GET with body (what `agentcompass view` would serve)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass
    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def run_python(box, script: str, *args: str):
    path = f"/tmp/probe-{uuid.uuid4().hex[:8]}.py"
    box.exec(f"cat > {path} <<'EOF'\n{script}\nEOF")
    return box.exec(f"python3 {path} {' '.join(args)}", timeout=30)


# -- host Unix sockets -----------------------------------------------------------------------------------

@pytest.mark.parametrize("allow_internet", [False, True])
def test_the_docker_socket_cannot_be_reached(boxes, allow_internet):
    box = boxes(allow_internet)
    for path in ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock"):
        done = run_python(box, CONNECT_UNIX, path)
        assert done.exit_code != 0 and "ANSWERED" not in done.stdout, (path, done)


def test_no_unix_socket_anywhere_the_sandbox_can_see(boxes):
    # One planted where the old fence (the host's root, read-only) showed it, so the scan can find one.
    planted_dir = Path(tempfile.mkdtemp(prefix="agentcompass-test-", dir="/var/tmp"))
    planted = socket.socket(socket.AF_UNIX)
    planted.bind(str(planted_dir / "service.sock"))
    planted.listen(1)
    try:
        box = boxes(True)
        box.exec("python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/tmp/own.sock')\"")  # its own: fine
        scan = box.exec("find / -path /proc -prune -o -type s -print 2>/dev/null; echo scanned", timeout=120)
    finally:
        planted.close()
        shutil.rmtree(planted_dir)
    found = [line for line in scan.stdout.split() if line != "scanned"]
    assert scan.stdout.strip().endswith("scanned")
    assert found == ["/tmp/own.sock"], found


@pytest.mark.parametrize("allow_internet", [False, True])
def test_a_host_abstract_socket_is_not_reachable(boxes, allow_internet):
    name = f"agentcompass-test-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX)
    server.bind("\0" + name)
    server.listen(8)
    try:
        reach = socket.socket(socket.AF_UNIX)
        reach.connect("\0" + name)  # the host itself reaches it: the attack has a target
        reach.close()
        done = run_python(boxes(allow_internet), CONNECT_UNIX, "@" + name)
    finally:
        server.close()
    assert done.exit_code != 0 and "ANSWERED" not in done.stdout, done
    assert "ConnectionRefused" in done.stderr, done.stderr


# -- root's capabilities ----------------------------------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="without root bwrap runs in a user namespace: no capability on the host")
def test_root_in_the_sandbox_cannot_make_the_hosts_disk_nor_mount(boxes):
    disk = os.stat("/usr").st_dev  # the block device /usr lives on, as a root agent would make it
    box = boxes(False)
    made = box.exec(f"mknod /tmp/disk b {os.major(disk)} {os.minor(disk)} && head -c 512 /tmp/disk | od | head -2")
    mounted = box.exec("mkdir -p /tmp/m && mount -t tmpfs none /tmp/m")
    honest = box.exec("touch /app/f && chown nobody /app/f && stat -c %U /app/f")  # what root tasks do stays possible
    assert made.exit_code != 0 and "Operation not permitted" in made.stderr, made
    assert mounted.exit_code != 0, mounted
    assert (honest.exit_code, honest.stdout.strip()) == (0, "nobody"), honest


# -- the host's loopback ---------------------------------------------------------------------------------

def test_an_internet_task_cannot_reach_the_hosts_loopback_but_reaches_the_forwarded_gateway_port(boxes):
    secret = f"other-attempts-patch-{uuid.uuid4().hex}"
    with http_server("127.0.0.1", secret) as viewer, http_server("127.0.0.1", "gateway answers") as gateway:
        box = boxes(True)
        box.forward_host_port(gateway)  # what the model gateway asks for (agentcompass.gateway.server)
        leaked = box.exec(HTTP_GET.format(f"http://127.0.0.1:{viewer}/"), timeout=30)
        gateway_call = box.exec(HTTP_GET.format(f"http://127.0.0.1:{gateway}/"), timeout=30)
    assert leaked.exit_code != 0 and secret not in leaked.stdout, leaked
    assert gateway_call.exit_code == 0 and "gateway answers" in gateway_call.stdout, gateway_call
    assert our_pastas() == [], "pasta outlived its command"


def our_pastas() -> list[int]:
    """pasta processes this test process started (they carry its reaper's mark)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if (entry / "comm").read_text().startswith("pas") and \
                    f"{EXEC_MARK}={REAPER.token}-".encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_task_without_internet_reaches_only_the_forwarded_port(boxes):
    with (http_server("127.0.0.1", "secret") as viewer, http_server("127.0.0.1", "gateway answers") as gateway,
          server_in_own_network_namespace() as (address, port)):
        box = boxes(False)
        box.forward_host_port(gateway)
        leaked = box.exec(HTTP_GET.format(f"http://127.0.0.1:{viewer}/"), timeout=30)
        gateway_call = box.exec(HTTP_GET.format(f"http://127.0.0.1:{gateway}/"), timeout=30)
        outside = box.exec(f"timeout 5 bash -c 'exec 3<>/dev/tcp/{address}/{port}'", timeout=30)
    assert leaked.exit_code != 0 and "secret" not in leaked.stdout
    assert gateway_call.exit_code == 0 and "gateway answers" in gateway_call.stdout, gateway_call
    assert outside.exit_code != 0 and "unreachable" in outside.stderr, outside


def test_internet_without_user_mode_networking_is_refused_in_one_line(monkeypatch, tmp_path):
    which = shutil.which
    monkeypatch.setattr(network.shutil, "which", lambda name: None if name == "pasta" else which(name))
    provider = LocalProvider(isolation="bwrap", root=str(tmp_path))
    provider.check(SandboxSpec(name="offline", allow_internet=False))
    with pytest.raises(UserError, match="apt-get install passt") as refused:
        provider.check(SandboxSpec(name="online", allow_internet=True))
    assert "\n" not in str(refused.value)


# -- secrets in the process list ---------------------------------------------------------------------------

def test_a_task_env_secret_is_in_no_host_command_line(boxes):
    key, secret = f"AGC_KEY_{uuid.uuid4().hex[:8]}", f"sk-{uuid.uuid4().hex}"
    call_key, call_secret = f"AGC_CALL_{uuid.uuid4().hex[:8]}", f"tok-{uuid.uuid4().hex}"
    box = boxes(True, env={key: secret})
    seen: list[str] = []
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(done=box.exec(  # the command names no key itself
        "env; sleep 2", env={call_key: call_secret}, timeout=60)))
    worker.start()
    while worker.is_alive():
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                text = cmdline.read_bytes().decode(errors="replace")
            except OSError:
                continue
            seen += [f"{cmdline.parent.name}: {needle}" for needle in (key, secret, call_key, call_secret) if needle in text]
        time.sleep(0.05)
    worker.join()
    assert {f"{key}={secret}", f"{call_key}={call_secret}"} <= set(result["done"].stdout.split())  # the sandbox got both
    assert seen == []


# -- a benchmark, the results and the cache, outside $HOME and /tmp ----------------------------------------

ATTACK = """\
found=/app/found.txt
for p in {bench}/attack/tests/expected.txt {bench}/attack/solution/solve.sh {cache}/marker.txt {results}; do
  echo "try $p" >> $found
  (cat "$p" 2>&1 || ls -R "$p" 2>&1) >> $found
done
cat {bench}/attack/tests/expected.txt > /app/answer 2>/dev/null
true
"""
CHECK = 'cp /app/found.txt /logs/verifier/found.txt; if [ "$(cat /app/answer 2>/dev/null)" = "$(cat /tests/expected.txt)" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt'


def test_a_benchmark_its_results_and_the_cache_outside_home_and_tmp_are_invisible(cli, tmp_path):
    if not os.access("/opt", os.W_OK):
        pytest.skip("needs a writable /opt (a folder the old fence showed: not $HOME, not /tmp)")
    outside = Path(tempfile.mkdtemp(prefix="agentcompass-test-", dir="/opt"))
    bench, cache, results = outside / "bench", outside / "cache", outside / "results"
    token, marker = f"EXPECTED-{uuid.uuid4().hex}", f"CACHED-{uuid.uuid4().hex}"
    try:
        task = make_task(bench, "attack", solve=ATTACK.format(bench=bench, cache=cache, results=results), test=CHECK)
        (task / "tests" / "expected.txt").write_text(token + "\n")
        add_toml(task, "[environment]\nallow_internet = true\n")
        cache.mkdir()
        (cache / "marker.txt").write_text(marker)
        make_recipe(tmp_path / "conf", "attack", bench)
        done = cli("run", "attack", "oracle", "none", "--config-dir", str(tmp_path / "conf"), "--env", "local",
                   "--env-params", json.dumps({"isolation": "bwrap"}), "--results-dir", str(results),
                   "--run-name", "a", env={"AGENTCOMPASS_CACHE_DIR": str(cache)})
        assert done.returncode == 0, done.stderr
        attempt = results / "a" / "attack__oracle__none__local" / "tasks" / "attack" / "attempt-1"
        found = next(attempt.rglob("found.txt"), None)
        assert found is not None, sorted(str(p.relative_to(attempt)) for p in attempt.rglob("*"))
        found = found.read_text()
        verdict = json.loads((attempt / "result.json").read_text())
    finally:
        shutil.rmtree(outside)
    assert found.count("try ") == 4, found  # every attempt ran...
    assert token not in found and marker not in found and "attempt-1" not in found, found  # ...and read nothing
    assert verdict["reward"] == 0, verdict


# -- honest controls ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("allow_internet", [False, True])
def test_an_agent_writes_and_runs_python(boxes, allow_internet):
    box = boxes(allow_internet)
    box.exec("mkdir -p /app/pkg && printf 'def area(w, h):\\n    return w * h\\n' > /app/pkg/shapes.py")
    system = box.exec("cd /app && python3 -c 'from pkg.shapes import area; print(area(6, 7))'")
    ours = box.exec(f"cd /app && {sys.executable} -c 'from pkg.shapes import area; print(area(6, 7))'")
    assert (system.exit_code, system.stdout.strip()) == (0, "42"), system
    assert (ours.exit_code, ours.stdout.strip()) == (0, "42"), ours


def answer_dns(sock: socket.socket, stop: threading.Event) -> None:
    """A resolver that answers every A question with 203.0.113.7 (a documentation address)."""
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            query, client = sock.recvfrom(512)
        except OSError:
            continue
        question = query[12:query.index(b"\0", 12) + 5]
        header = query[:2] + b"\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00"
        answer = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + bytes([203, 0, 113, 7])
        sock.sendto(header + question + answer, client)


def test_names_resolve_when_the_hosts_resolver_is_on_its_loopback(boxes, monkeypatch, tmp_path):
    """systemd-resolved's 127.0.0.53 is the host's loopback, which the namespace does not reach: the queries
    go through pasta's DNS forward to that resolver (port 53 of it, nothing else)."""
    if network.default_gateway() is None:
        pytest.skip("this host has no IPv4 default route for pasta to copy")
    resolver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        resolver.bind(("127.0.0.1", 53))
    except OSError as exc:
        resolver.close()
        pytest.skip(f"cannot stand in for a loopback resolver on 127.0.0.1:53: {exc}")
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 127.0.0.1\nsearch example.internal\n")
    monkeypatch.setattr(network, "RESOLV_CONF", str(conf))
    network.dns_forward.cache_clear()
    stop = threading.Event()
    answering = threading.Thread(target=answer_dns, args=(resolver, stop))
    answering.start()
    try:
        box = boxes(True)
        resolved = box.exec("getent hosts anything.example.test; cat /etc/resolv.conf", timeout=30)
    finally:
        stop.set()
        answering.join()
        resolver.close()
        network.dns_forward.cache_clear()
    assert resolved.exit_code == 0 and "203.0.113.7" in resolved.stdout, resolved
    assert "search example.internal" in resolved.stdout and "127.0.0.1" not in resolved.stdout
