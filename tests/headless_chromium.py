"""Open a page in Debian's headless Chromium over the DevTools protocol (aiohttp's websocket):
every network request the page makes, what a JS expression returns, and a full-page screenshot."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--remote-debugging-port=0"]
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")


@dataclass
class PageVisit:
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    failed: list[str] = field(default_factory=list)  # requests that failed, with the reason
    errors: list[str] = field(default_factory=list)  # uncaught JS exceptions
    result: Any = None  # what the probe expression returned
    screenshot: bytes = b""


def chromium() -> str | None:
    return shutil.which("chromium")


def visit(url: str, probe: str, settle_s: float = 1.5, timeout_s: float = 60, width: int = 1400) -> PageVisit:
    """Load `url` in a window `width` px wide, wait for load plus `settle_s`, evaluate `probe` (a JS expression
    returning JSON-able data)."""
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.Popen([chromium(), *FLAGS, f"--window-size={width},1000", f"--user-data-dir={profile}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port = debug_port(Path(profile), proc, timeout_s)
            return asyncio.run(asyncio.wait_for(drive(port, url, probe, settle_s), timeout_s))
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def debug_port(profile: Path, proc: subprocess.Popen, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    marker = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if marker.is_file() and marker.read_text().strip():
            return int(marker.read_text().splitlines()[0])
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode}")
        time.sleep(0.1)
    raise TimeoutError("chromium did not open its DevTools port")


async def drive(port: int, url: str, probe: str, settle_s: float) -> PageVisit:
    import aiohttp

    seen = PageVisit()
    ids = itertools.count(1)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json(content_type=None)
        page = next(t for t in targets if t["type"] == "page")
        async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            pending: dict[int, asyncio.Future] = {}
            loaded = asyncio.Event()

            async def listen() -> None:
                async for message in ws:
                    data = json.loads(message.data)
                    if "id" in data and data["id"] in pending:
                        pending.pop(data["id"]).set_result(data)
                    method, params = data.get("method"), data.get("params", {})
                    if method == "Network.requestWillBeSent":
                        seen.requests.append(params["request"]["url"])
                    elif method == "Network.loadingFailed":
                        seen.failed.append(f"{params.get('type')}: {params.get('errorText')}")
                    elif method == "Runtime.exceptionThrown":
                        seen.errors.append(json.dumps(params["exceptionDetails"])[:300])
                    elif method == "Page.loadEventFired":
                        loaded.set()

            async def call(method: str, **params: Any) -> dict:
                number = next(ids)
                pending[number] = asyncio.get_running_loop().create_future()
                await ws.send_str(json.dumps({"id": number, "method": method, "params": params}))
                return (await pending[number]).get("result", {})

            listener = asyncio.create_task(listen())
            for domain in ("Network", "Page", "Runtime"):
                await call(f"{domain}.enable")
            await call("Page.navigate", url=url)
            await loaded.wait()
            await asyncio.sleep(settle_s)
            evaluated = await call("Runtime.evaluate", expression=f"JSON.stringify({probe})", returnByValue=True)
            seen.result = json.loads(evaluated["result"]["value"])
            # The whole page in one picture: a viewport as tall as the content, then a plain capture.
            size = (await call("Page.getLayoutMetrics"))["cssContentSize"]
            await call("Emulation.setDeviceMetricsOverride", width=int(size["width"]), height=int(size["height"]),
                       deviceScaleFactor=1, mobile=False)
            await asyncio.sleep(settle_s)
            shot = await call("Page.captureScreenshot", format="png")
            seen.screenshot = base64.b64decode(shot["data"])
            listener.cancel()
    return seen


def external(requests: list[str]) -> list[str]:
    return [u for u in requests if not u.startswith(LOCAL_SCHEMES)]
