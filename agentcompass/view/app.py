"""The viewer's web app: pages and their JSON, over the runs under the given roots.

Pages: `/` every run and sweep (live), `/run` one run's task x attempt grid (live, filtered),
`/attempt` one attempt (instruction, steps, patch, verifier output, timings, logs), `/compare`
two or more setups side by side on one task (steps aligned, first divergence marked) or, without a
task, which setup solved which task. Nothing outside the roots is ever read: run ids are paths
relative to a root and are checked to stay inside it, files are served from an attempt's own
directory only, and no link is followed out of the folder a file is read from (core/safe_files.py).
Every response says what the browser may do with it (SecurityHeaders): the pages run only the
viewer's own script, are never framed, and are never sniffed into another type."""

from __future__ import annotations

import html
import secrets
from urllib.parse import quote
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from agentcompass.core.safe_files import contained
from agentcompass.report.regraded import pair_of_run
from agentcompass.view.catalog import Catalog, RunRef, labels_of, read_json, run_status
from agentcompass.view.index import Indexes
from agentcompass.view.pages import attempt_page, with_analysis, compare_context, solved_table, sweep_settings
from agentcompass.view.redact import redact
from agentcompass.view.scores import headline

HERE = Path(__file__).resolve().parent
COOKIE = "agentcompass_view"
LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]
# The viewer's pages: its own script and stylesheet only (no inline script an agent's text could become), JSON
# fetched from itself, never framed (clickjacking), forms and <base> nowhere else.
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
               "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
# A report made by `agentcompass report` carries its charts' script inline (plotly): allowed to run, but it
# reaches nothing (no fetch, no external script or image).
REPORT_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
                 "font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'")


def run_summary(catalog: Catalog, indexes: Indexes, run: RunRef) -> dict[str, Any]:
    info = read_json(run.path / "run.json")
    summary = read_json(run.path / "summary.json")
    k = int(((info.get("config") or {}).get("run") or {}).get("k") or 1)
    rows = indexes.rows(run.path)
    figures = headline(rows, k, summary.get("tasks"))
    labels = labels_of(info)
    return {"id": run.id, "sweep": run.sweep, "name": run.path.name, "status": run_status(run.path, info), "k": k,
            "labels": labels, "settings": sweep_settings(labels), "trials_expected": summary.get("trials_expected"),
            "report": report_link(run), "started_at": info.get("started_at"), **figures}


def report_file(run_dir: Path) -> Path | None:
    """A report made over this run's sweep (`agentcompass report RUN_NAME`, the default --out)."""
    for candidate in (run_dir.parent / "report" / "report.html", run_dir / "report" / "report.html"):
        if candidate.is_file():
            return candidate
    return None


def report_link(run: RunRef) -> str | None:
    return f"/report?run={quote(run.id)}" if report_file(run.path) else None


def make_app(roots: list[Path], token: str | None = None, allowed_hosts: list[str] | None = None) -> Starlette:
    catalog = Catalog(roots)
    indexes = Indexes()
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["redact"] = redact

    def run_of(request: Request) -> RunRef:
        run = catalog.resolve(request.query_params.get("run", ""))
        if run is None:
            raise NotFound("no such run under the viewer's results roots")
        return run

    async def runs_page(request: Request) -> Response:
        return templates.TemplateResponse(request, "runs.html", {"roots": [str(r) for r in catalog.roots]})

    async def runs_api(request: Request) -> Response:
        return JSONResponse({"runs": [run_summary(catalog, indexes, r) for r in catalog.runs()]})

    async def run_page(request: Request) -> Response:
        run = run_of(request)
        return templates.TemplateResponse(request, "run.html", {"run": run_summary(catalog, indexes, run),
                                                                "regrade": pair_of_run(run.path)})

    async def rows_api(request: Request) -> Response:
        run = run_of(request)
        rows = with_analysis(indexes.rows(run.path), run.path)
        return JSONResponse({"summary": run_summary(catalog, indexes, run), "rows": rows})

    async def attempt(request: Request) -> Response:
        run = run_of(request)
        task, number = request.query_params.get("task", ""), request.query_params.get("n", "1")
        directory = catalog.attempt_dir(run, task, int(number)) if number.isdigit() else None
        if directory is None:
            raise NotFound(f"no attempt {number} of task {task!r} in this run")
        context = attempt_page(run, directory, task, int(number))
        return templates.TemplateResponse(request, "attempt.html", context)

    async def compare(request: Request) -> Response:
        runs = [catalog.resolve(r) for r in request.query_params.getlist("run")]
        if not runs or any(r is None for r in runs):
            raise NotFound("compare needs run=ID for each setup, all under the viewer's results roots")
        task = request.query_params.get("task")
        if task:
            context = compare_context([r for r in runs if r], task, catalog)
            return templates.TemplateResponse(request, "compare.html", context)
        table = solved_table([r for r in runs if r], indexes)
        return templates.TemplateResponse(request, "solved.html", table)

    async def raw_file(request: Request) -> Response:
        run = run_of(request)
        task, number = request.query_params.get("task", ""), request.query_params.get("n", "")
        directory = catalog.attempt_dir(run, task, int(number)) if number.isdigit() else None
        name = request.query_params.get("file", "")
        path = contained(directory, directory / name) if directory and name else None
        if path is None:  # missing, or a link out of the attempt's folder (never followed)
            raise NotFound("no such file in this attempt")
        return PlainTextResponse(redact(path.read_text(encoding="utf-8", errors="replace")))

    async def report(request: Request) -> Response:
        run = run_of(request)
        path = report_file(run.path)
        if path is None or not any(contained(root, path) for root in catalog.roots):
            raise NotFound("no report over this run; make one with agentcompass report")
        return HTMLResponse(path.read_text(encoding="utf-8"), headers={"Content-Security-Policy": REPORT_POLICY})

    async def not_found(request: Request, exc: Exception) -> Response:
        return HTMLResponse(f"<p>{html.escape(str(exc))}</p><p><a href='/'>all runs</a></p>", status_code=404)

    routes = [Route("/", runs_page), Route("/api/runs", runs_api), Route("/run", run_page), Route("/api/rows", rows_api),
              Route("/attempt", attempt), Route("/compare", compare), Route("/file", raw_file), Route("/report", report),
              Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or LOOPBACK_NAMES)]
    app = Starlette(routes=routes, middleware=middleware, exception_handlers={NotFound: not_found})
    return SecurityHeaders(TokenGate(app, token) if token else app)


class NotFound(Exception):
    pass


class SecurityHeaders:
    """On every response, a refusal (401, 400, 404) included: the content security policy (a route may set its
    own), no type sniffing (a log served as text stays text), and no URL (which may hold the token) sent on."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = message["headers"] = list(message.get("headers") or [])
                present = {name.lower() for name, _ in headers}
                for name, value in ((b"content-security-policy", PAGE_POLICY.encode()),
                                    (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                                    (b"cross-origin-opener-policy", b"same-origin")):
                    if name not in present:
                        headers.append((name, value))
            await send(message)

        return await self.app(scope, receive, send_with_headers)


class TokenGate:
    """Every request carries the token: `?token=` (then kept in a cookie), the cookie, or `Authorization: Bearer`."""

    def __init__(self, app: Any, token: str):
        self.app, self.token = app, token

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        offered = [request.query_params.get("token"), request.cookies.get(COOKIE),
                   request.headers.get("authorization", "").removeprefix("Bearer ").strip() or None]
        if not any(o and secrets.compare_digest(o.encode(), self.token.encode()) for o in offered):
            return await PlainTextResponse("a token is required: open the URL agentcompass view printed", 401)(scope, receive, send)
        if request.query_params.get("token"):
            async def send_with_cookie(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                    message.setdefault("headers", []).append((b"set-cookie", cookie.encode()))
                await send(message)
            return await self.app(scope, receive, send_with_cookie)
        return await self.app(scope, receive, send)
