"""The Agent Client Protocol's client side, run inside the sandbox: it starts an ACP agent, drives one prompt through
it, and serves what the agent asks of its client (permissions, files, terminals).

Standalone on purpose (the standard library only, no agentcompass import): the harness uploads this file and runs it
with the bundled interpreter beside the agent. JSON-RPC 2.0 over the agent's stdin/stdout, one message a line, as
ACP's stdio transport says. Its stdout is a JSON-lines record of the session (every message the agent sent, then a
`result` line: stop reason, usage, error); its stderr carries the agent's own stderr and one line per failure.
Exit 0 when the prompt turn ended (whatever its stop reason), 1 when the agent failed it or went away, 2 on bad use.

The order, as Harbor's ACP runner goes: initialize (fs and terminal capabilities) -> authenticate, when the agent
offers a method whose environment variables are all set -> session/new in the working directory -> the model, when
the session advertises a way to choose it (session/set_model or a `model` config option) -> session/prompt.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = 1
METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32601, -32602, -32603
RESOURCE_NOT_FOUND = -32002


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def payload(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **({"data": self.data} if self.data is not None else {})}


class AgentGone(Exception):
    """The agent's process ended (or closed its stdout) with requests still unanswered."""


class Terminal:
    """A command the agent asked to run: its output (the last `limit` bytes) and its exit."""

    def __init__(self, process: subprocess.Popen, limit: int | None) -> None:
        self.process, self.limit = process, limit
        self.output, self.truncated = b"", False
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self) -> None:
        assert self.process.stdout is not None
        for chunk in iter(lambda: self.process.stdout.read1(65536), b""):  # type: ignore[union-attr]
            with self.lock:
                self.output += chunk
                if self.limit is not None and len(self.output) > self.limit:
                    self.output, self.truncated = self.output[len(self.output) - self.limit:], True

    def text(self) -> str:
        with self.lock:
            return self.output.decode("utf-8", errors="replace")

    def exit_status(self) -> dict[str, Any] | None:
        code = self.process.poll()
        if code is None:
            return None
        return {"exitCode": code, "signal": None} if code >= 0 else {"exitCode": None, "signal": signal.Signals(-code).name}


class Client:
    def __init__(self, argv: list[str], cwd: str, permission: str) -> None:
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=cwd)
        self.permission = permission
        self.write_lock, self.id_lock = threading.Lock(), threading.Lock()
        self.pending: dict[int, queue.Queue] = {}
        self.next_id = 0
        self.terminals: dict[str, Terminal] = {}
        self.usage_update: dict[str, Any] | None = None
        self.gone = threading.Event()
        threading.Thread(target=self.read, daemon=True).start()

    # -- the wire
    def send(self, message: dict[str, Any]) -> None:
        line = json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=False) + "\n"
        with self.write_lock:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(line.encode())
                self.process.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise AgentGone(f"the agent closed its stdin: {exc}") from exc

    def request(self, method: str, params: dict[str, Any]) -> Any:
        replies: queue.Queue = queue.Queue(maxsize=1)
        with self.id_lock:
            self.next_id += 1
            rid = self.next_id
            self.pending[rid] = replies
        self.send({"id": rid, "method": method, "params": params})
        reply = replies.get()
        if reply is None:
            raise AgentGone(f"the agent exited (code {self.process.poll()}) before answering {method}")
        if "error" in reply:
            error = reply["error"] or {}
            raise RpcError(int(error.get("code", INTERNAL_ERROR)), str(error.get("message", "")), error.get("data"))
        return reply.get("result")

    def read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            try:
                message = json.loads(raw)
            except json.JSONDecodeError:
                print(f"acp: not JSON-RPC on the agent's stdout: {raw[:200]!r}", file=sys.stderr, flush=True)
                continue
            if not isinstance(message, dict):
                continue
            record(message)
            if "method" in message and "id" in message:  # the agent asks its client: may block (a terminal's wait)
                threading.Thread(target=self.answer, args=(message,), daemon=True).start()
            elif "method" in message:
                self.notified(message)
            elif message.get("id") in self.pending:
                self.pending.pop(message["id"]).put(message)
        self.gone.set()
        for replies in list(self.pending.values()):
            replies.put(None)

    def answer(self, message: dict[str, Any]) -> None:
        try:
            handler = HANDLERS.get(message["method"])
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, f"method not found: {message['method']}")
            reply: dict[str, Any] = {"id": message["id"], "result": handler(self, message.get("params") or {})}
        except RpcError as exc:
            reply = {"id": message["id"], "error": exc.payload()}
        except Exception as exc:  # a handler's own failure is the agent's error to see, not ours to die of
            reply = {"id": message["id"], "error": RpcError(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}").payload()}
        try:
            self.send(reply)
        except AgentGone:
            pass

    def notified(self, message: dict[str, Any]) -> None:
        update = (message.get("params") or {}).get("update") or {}
        if message["method"] == "session/update" and update.get("sessionUpdate") == "usage_update":
            self.usage_update = update

    # -- what the agent may ask
    def request_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        options = params.get("options") or []
        chosen = next((o for o in options if o.get("kind") in ("allow_once", "allow_always")), None)
        if self.permission != "allow" or chosen is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": chosen["optionId"]}}

    def read_text_file(self, params: dict[str, Any]) -> dict[str, Any]:
        path = absolute(params, "path")
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise RpcError(RESOURCE_NOT_FOUND, f"no such file: {path}") from exc
        line, limit = params.get("line"), params.get("limit")
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max(int(line or 1), 1) - 1
            text = "".join(lines[start: None if limit is None else start + int(limit)])
        return {"content": text}

    def write_text_file(self, params: dict[str, Any]) -> None:
        path = absolute(params, "path")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(params.get("content", "")), encoding="utf-8")
        return None

    def create_terminal(self, params: dict[str, Any]) -> dict[str, Any]:
        command, args = str(params.get("command") or "").strip(), [str(a) for a in params.get("args") or []]
        if not command:
            raise RpcError(INVALID_PARAMS, "terminal/create: command is empty")
        # A whole command line with no args (what several agents send) runs in a shell; command + args runs as is.
        argv = ["/bin/sh", "-c", command] if not args and any(c in command for c in " |&;<>$`'\"") else [command, *args]
        env = dict(os.environ)
        env.update({str(v["name"]): str(v["value"]) for v in params.get("env") or [] if "name" in v})
        cwd = str(absolute(params, "cwd")) if params.get("cwd") else os.getcwd()
        try:
            process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        except FileNotFoundError as exc:
            raise RpcError(RESOURCE_NOT_FOUND, f"terminal/create: {exc}") from exc
        terminal_id = f"term_{uuid.uuid4().hex}"
        limit = params.get("outputByteLimit")
        self.terminals[terminal_id] = Terminal(process, int(limit) if limit is not None else None)
        return {"terminalId": terminal_id}

    def terminal(self, params: dict[str, Any]) -> Terminal:
        found = self.terminals.get(str(params.get("terminalId")))
        if found is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"no terminal {params.get('terminalId')}")
        return found

    def terminal_output(self, params: dict[str, Any]) -> dict[str, Any]:
        terminal = self.terminal(params)
        status = terminal.exit_status()
        if status is not None:
            terminal.reader.join(5)
        return {"output": terminal.text(), "truncated": terminal.truncated,
                **({"exitStatus": status} if status is not None else {})}

    def wait_for_terminal_exit(self, params: dict[str, Any]) -> dict[str, Any]:
        terminal = self.terminal(params)
        terminal.process.wait()
        terminal.reader.join(5)
        return terminal.exit_status() or {}

    def kill_terminal(self, params: dict[str, Any]) -> None:
        terminal = self.terminal(params)
        if terminal.process.poll() is None:
            try:
                os.killpg(terminal.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            terminal.process.wait()
        return None

    def release_terminal(self, params: dict[str, Any]) -> None:
        self.kill_terminal(params)
        self.terminals.pop(str(params.get("terminalId")), None)
        return None


HANDLERS = {"session/request_permission": Client.request_permission, "fs/read_text_file": Client.read_text_file,
            "fs/write_text_file": Client.write_text_file, "terminal/create": Client.create_terminal,
            "terminal/output": Client.terminal_output, "terminal/wait_for_exit": Client.wait_for_terminal_exit,
            "terminal/kill": Client.kill_terminal, "terminal/release": Client.release_terminal}


def absolute(params: dict[str, Any], key: str) -> Path:
    path = Path(str(params.get(key) or ""))
    if not path.is_absolute():
        raise RpcError(INVALID_PARAMS, f"{key} must be an absolute path, got {params.get(key)!r}")
    return path


def record(event: dict[str, Any]) -> None:
    print(json.dumps(event, ensure_ascii=False), flush=True)


def auth_method(methods: list[dict[str, Any]]) -> str | None:
    """The first method offered whose required environment variables are all set (Harbor's `auto` policy)."""
    for method in methods or []:
        names = [v.get("name") for v in method.get("vars") or [] if not v.get("optional")]
        if names and all(os.environ.get(str(n)) for n in names):
            return str(method.get("id"))
    return None


def choose_model(client: Client, session: dict[str, Any], model: str) -> dict[str, Any]:
    """The model the session runs, by whichever mechanism the agent advertised; none advertised: its own config's."""
    wanted = [model, model.split("/", 1)[-1]]
    models = session.get("models") or {}
    available = [m.get("modelId") for m in models.get("availableModels") or []]
    if available:
        found = next((m for m in wanted if m in available), None)
        if found is None:
            raise RpcError(INVALID_PARAMS, f"the agent does not offer model {model!r}; it offers {', '.join(map(str, available))}")
        client.request("session/set_model", {"sessionId": session["sessionId"], "modelId": found})
        return {"mechanism": "session/set_model", "model": found}
    for option in session.get("configOptions") or []:
        if option.get("category") == "model" or str(option.get("id", "")).lower() in ("model", "model_id", "modelid"):
            values = [o.get("value") for o in option.get("options") or [] if "value" in o]
            found = next((m for m in wanted if not values or m in values), None)
            if found is None:
                raise RpcError(INVALID_PARAMS, f"the agent does not offer model {model!r}; it offers {', '.join(map(str, values))}")
            client.request("session/set_config_option", {"sessionId": session["sessionId"], "configId": option["id"],
                                                         "value": found})
            return {"mechanism": "session/set_config_option", "model": found}
    return {"mechanism": "agent configuration", "model": model}


def drive(client: Client, prompt: str, cwd: str, model: str | None, version: str) -> dict[str, Any]:
    result: dict[str, Any] = {"type": "result"}
    init = client.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "clientInfo": {"name": "agentcompass", "version": version},
                                         "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True},
                                                                "terminal": True}})
    result["agentInfo"] = (init or {}).get("agentInfo")
    method = auth_method((init or {}).get("authMethods") or [])
    if method:
        client.request("authenticate", {"methodId": method})
        result["authenticated"] = method
    session = client.request("session/new", {"cwd": cwd, "mcpServers": []}) or {}
    if model:
        result["model"] = choose_model(client, session, model)
    reply = client.request("session/prompt", {"sessionId": session.get("sessionId"),
                                              "prompt": [{"type": "text", "text": prompt}]}) or {}
    result["stopReason"], result["usage"] = reply.get("stopReason"), reply.get("usage")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="drive one prompt through an ACP agent")
    parser.add_argument("--prompt-file", required=True)
    parser.add_argument("--model", default=None)
    parser.add_argument("--client-version", default="0")
    parser.add_argument("--permission", choices=("allow", "deny"), default="allow")
    parser.add_argument("agent", nargs=argparse.REMAINDER, help="-- the agent's command line")
    args = parser.parse_args(argv)
    agent = args.agent[1:] if args.agent[:1] == ["--"] else args.agent
    if not agent:
        parser.error("the agent's command line is missing (after --)")
    cwd = os.getcwd()
    try:
        client = Client(agent, cwd, args.permission)
    except OSError as exc:
        print(f"acp: cannot start the agent {shlex.join(agent)}: {exc}", file=sys.stderr, flush=True)
        return 1
    code = 0
    try:
        result = drive(client, Path(args.prompt_file).read_text(encoding="utf-8"), cwd, args.model, args.client_version)
    except (RpcError, AgentGone) as exc:
        code = 1
        error = exc.payload() if isinstance(exc, RpcError) else {"message": str(exc)}
        result = {"type": "result", "error": error}
        print(f"acp: {error.get('message')} {json.dumps(error.get('data')) if error.get('data') else ''}".rstrip(),
              file=sys.stderr, flush=True)
    result["usageUpdate"] = client.usage_update
    record(result)
    for terminal_id in list(client.terminals):
        client.release_terminal({"terminalId": terminal_id})
    try:
        assert client.process.stdin is not None
        client.process.stdin.close()
        client.process.wait(5)
    except (OSError, subprocess.TimeoutExpired):
        client.process.kill()
    return code


if __name__ == "__main__":
    sys.exit(main())
