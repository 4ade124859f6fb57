"""A small coding agent that speaks the Agent Client Protocol on stdio, for the acp harness's tests.

Real JSON-RPC 2.0, one message a line: it answers initialize (offering an env-var auth method), authenticate,
session/new (advertising the models it can run, so the client must choose one with session/set_model) and
session/prompt. A prompt turn is a loop against an OpenAI chat-completions endpoint (OPENAI_BASE_URL and
OPENAI_API_KEY from its environment) offering one `bash` tool; each tool call runs through the *client* (terminal/create,
wait_for_exit, output, release), after asking its permission, and the turn ends on a reply without tool calls.
Each reply's text and tool calls go out as session/update notifications; the prompt's response carries the summed
usage. An HTTP error from the endpoint ends the turn with a JSON-RPC error naming the status.

ACP_TEST_MODELS (comma-separated) lists the models it offers; ACP_TEST_STOP forces the stop reason (refusal, ...).
"""

import json
import os
import sys
import threading
import urllib.error
import urllib.request

out_lock = threading.Lock()
replies = {}
reply_ready = threading.Condition()
next_id = [1000]


def send(message):
    with out_lock:
        sys.stdout.write(json.dumps(dict(jsonrpc="2.0", **message)) + "\n")
        sys.stdout.flush()


def ask(method, params):
    """A request to the client; its result (the reader thread hands replies over)."""
    with reply_ready:
        next_id[0] += 1
        rid = next_id[0]
    send({"id": rid, "method": method, "params": params})
    with reply_ready:
        while rid not in replies:
            reply_ready.wait()
        reply = replies.pop(rid)
    if "error" in reply:
        raise RuntimeError(f"client refused {method}: {reply['error']}")
    return reply.get("result")


def update(session_id, body):
    send({"method": "session/update", "params": {"sessionId": session_id, "update": body}})


def chat(messages, model):
    body = {"model": model, "messages": messages, "tools": [{"type": "function", "function": {
        "name": "bash", "description": "Run a shell command", "parameters": {
            "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]}
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def run_command(session_id, call_id, command, cwd):
    permission = ask("session/request_permission", {"sessionId": session_id, "toolCall": {
        "toolCallId": call_id, "title": command, "kind": "execute"}, "options": [
        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
        {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]})
    if (permission or {}).get("outcome", {}).get("outcome") != "selected":
        return "(permission denied)"
    terminal = ask("terminal/create", {"sessionId": session_id, "command": "/bin/sh", "args": ["-c", command],
                                       "cwd": cwd, "outputByteLimit": 20000})["terminalId"]
    ask("terminal/wait_for_exit", {"sessionId": session_id, "terminalId": terminal})
    output = ask("terminal/output", {"sessionId": session_id, "terminalId": terminal})
    ask("terminal/release", {"sessionId": session_id, "terminalId": terminal})
    return output["output"] + f"\n(exit {output.get('exitStatus', {}).get('exitCode')})"


def prompt(rid, params, state):
    session_id = params["sessionId"]
    text = "".join(block.get("text", "") for block in params["prompt"] if block.get("type") == "text")
    messages = [{"role": "user", "content": text}]
    usage = {"inputTokens": 0, "outputTokens": 0, "cachedReadTokens": 0}
    try:
        for _ in range(50):
            reply = chat(messages, state["model"])
            used = reply.get("usage") or {}
            usage["inputTokens"] += used.get("prompt_tokens", 0)
            usage["outputTokens"] += used.get("completion_tokens", 0)
            usage["cachedReadTokens"] += (used.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            message = reply["choices"][0]["message"]
            messages.append(message)
            if message.get("content"):
                update(session_id, {"sessionUpdate": "agent_message_chunk",
                                    "content": {"type": "text", "text": message["content"]}})
            calls = message.get("tool_calls") or []
            if not calls:
                break
            for call in calls:
                command = json.loads(call["function"]["arguments"])["command"]
                update(session_id, {"sessionUpdate": "tool_call", "toolCallId": call["id"], "title": command,
                                    "kind": "execute", "status": "pending", "rawInput": {"command": command}})
                output = run_command(session_id, call["id"], command, state["cwd"])
                update(session_id, {"sessionUpdate": "tool_call_update", "toolCallId": call["id"],
                                    "status": "completed", "rawOutput": {"output": output}})
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        print(f"acp_agent: the endpoint answered HTTP {exc.code}: {detail}", file=sys.stderr, flush=True)
        send({"id": rid, "error": {"code": -32603, "message": f"model request failed: HTTP {exc.code}",
                                   "data": {"status": exc.code, "body": detail}}})
        return
    update(session_id, {"sessionUpdate": "usage_update", "used": usage["inputTokens"] + usage["outputTokens"],
                        "size": 200000})
    send({"id": rid, "result": {"stopReason": os.environ.get("ACP_TEST_STOP", "end_turn"),
                                "usage": dict(usage, totalTokens=usage["inputTokens"] + usage["outputTokens"])}})


def handle(message, state):
    method, params, rid = message.get("method"), message.get("params") or {}, message.get("id")
    if method == "initialize":
        send({"id": rid, "result": {"protocolVersion": 1, "agentInfo": {"name": "acp-test-agent", "version": "1.0"},
                                    "agentCapabilities": {"loadSession": False},
                                    "authMethods": [{"id": "openai-key", "name": "OpenAI key",
                                                     "vars": [{"name": "OPENAI_API_KEY"}]}]}})
    elif method == "authenticate":
        state["authenticated"] = params.get("methodId")
        send({"id": rid, "result": {}})
    elif method == "session/new":
        state["cwd"] = params["cwd"]
        models = [m for m in os.environ.get("ACP_TEST_MODELS", "").split(",") if m]
        state["model"] = models[0] if models else "default"
        send({"id": rid, "result": {"sessionId": "sess-1", "models": {
            "currentModelId": state["model"], "availableModels": [{"modelId": m, "name": m} for m in models]}}})
    elif method == "session/set_model":
        state["model"] = params["modelId"]
        send({"id": rid, "result": {}})
    elif method == "session/prompt":
        if not state.get("authenticated"):
            send({"id": rid, "error": {"code": -32000, "message": "authentication required"}})
            return
        threading.Thread(target=prompt, args=(rid, params, state), daemon=True).start()
    elif rid is not None:
        send({"id": rid, "error": {"code": -32601, "message": f"method not found: {method}"}})


def main():
    state = {}
    for line in sys.stdin:
        message = json.loads(line)
        if "method" in message:
            handle(message, state)
        else:  # a reply to one of our requests
            with reply_ready:
                replies[message["id"]] = message
                reply_ready.notify_all()


if __name__ == "__main__":
    main()
