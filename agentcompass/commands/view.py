"""`agentcompass view [RESULTS...] [--port N] [--host H] [--token [T]] [--open]`: browse results in a local web app.

Binds to 127.0.0.1 by default. Any other host serves whoever can reach it, so it needs a token:
`--token` alone makes a random one, printed in the URL at start, and every request must carry it.
The app reads the results only, so it can watch a run another process is writing."""

from __future__ import annotations

import argparse
import errno
import ipaddress
import re
import secrets
import socket
import sys
from pathlib import Path

from agentcompass.core.errors import UserError
from agentcompass.view.live import register as register_viewer

DEFAULT_PORT = 8765
MIN_TOKEN_CHARS = 16  # a token anyone could guess in a few tries protects nothing
TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~-]+")  # as it travels: in a URL and a cookie, unquoted


def register(subparsers: object) -> None:
    parser = subparsers.add_parser("view", help="browse results in a local web app: runs, grids, trajectories, compare")  # type: ignore[attr-defined]
    parser.add_argument("results", nargs="*", metavar="RESULTS", help="results dirs, run names or run dirs (default results/)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT}; 0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs --token)")
    parser.add_argument("--token", nargs="?", const="", default=None, metavar="TOKEN",
                        help="require this token on every request (alone: a random one, printed at start)")
    parser.add_argument("--open", action="store_true", help="open the page in the default browser")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    roots = [Path(p) for p in (args.results or ["results"])]
    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        raise UserError(f"no results dir {', '.join(missing)}; pass results dirs, run names or run dirs that exist "
                        "(e.g. agentcompass view results/)")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a port; use 1-65535, or 0 for any free port")
    loopback = is_loopback(args.host)
    if not loopback and args.token is None:
        raise UserError(f"--host {args.host} lets other machines in; add --token (a random token, printed at start) "
                        "or keep the default --host 127.0.0.1")
    token = (args.token or secrets.token_urlsafe(24)) if args.token is not None else None
    if args.token and (len(args.token) < MIN_TOKEN_CHARS or not TOKEN_CHARS.fullmatch(args.token)):
        raise UserError(f"--token must be at least {MIN_TOKEN_CHARS} characters of A-Z a-z 0-9 . _ ~ - "
                        f"(got {len(args.token)}); use a longer one, or --token alone for a random one")
    try:
        import uvicorn

        from agentcompass.view.app import make_app
    except ImportError as exc:
        from agentcompass.core.install import pip_install

        raise UserError(f"agentcompass view needs the 'agents' extra ({exc.name} is missing); "
                        f"{pip_install('agents')}") from None
    hosts = None if not loopback else ["127.0.0.1", "localhost", "::1", "[::1]"]
    listening = bind(args.host, args.port)  # before anything starts: a busy port is one line, not uvicorn's log
    app = make_app(roots, token=token, allowed_hosts=hosts or ["*"])
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    original_startup = server.startup

    async def announce(sockets: object = None) -> None:
        await original_startup(sockets)  # type: ignore[arg-type]
        port = server.servers[0].sockets[0].getsockname()[1] if server.servers else args.port
        shown = f"[{args.host}]" if ":" in args.host else args.host
        url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
        registered.append(register_viewer(url.split("?")[0], roots))  # for `report`'s links (never the token)
        print(f"agentcompass view: {url}  (Ctrl-C to stop)", file=sys.stderr, flush=True)
        if args.open:
            import webbrowser

            webbrowser.open(url)

    registered: list[Path | None] = []
    server.startup = announce  # type: ignore[method-assign]
    try:
        server.run(sockets=[listening])
    except KeyboardInterrupt:  # Ctrl-C is how a viewer stops: nothing was running that needs resuming
        pass
    finally:
        listening.close()
        for path in filter(None, registered):
            path.unlink(missing_ok=True)
    print("agentcompass view: stopped", file=sys.stderr)
    return 0


def bind(host: str, port: int) -> socket.socket:
    """The viewer's listening socket, or one line saying why there is none and what to do."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise UserError(f"--host {host} is not an address this machine can listen on ({exc.strerror}); "
                        "use 127.0.0.1 or one of its own addresses") from None
    listening = socket.socket(family, kind, proto)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a just-stopped viewer's port is free
    try:
        listening.bind(address)
    except OSError as exc:
        listening.close()
        if exc.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} on {host} is in use (another viewer?); pick another with --port N, "
                            "or --port 0 for any free port") from None
        if exc.errno == errno.EACCES:
            raise UserError(f"port {port} needs privileges this user lacks; use a port above 1023 (--port "
                            f"{DEFAULT_PORT}) or --port 0 for any free port") from None
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}; try --host 127.0.0.1 or another --port") from None
    return listening
