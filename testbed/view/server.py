"""The view's web server: one page, its script, Plotly's bundled JavaScript (from the plotly Python
package: nothing is fetched from the internet), the records as JSON, and a server-sent-event stream
that sends what changed once a second. Starlette on uvicorn, in its own process at low priority so
the run's own processes keep the cores; it only reads the results folder.

    python -m testbed.view.server RUN_DIR --fd N      # the live view, on a socket the harness bound
    testbed view RUN_DIR                              # a replay (or a running run, from another shell)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import ipaddress
import json
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a hint only: the CLI checks --view-address without loading the run reader
    from testbed.view.state import RunState

PAGE = Path(__file__).resolve().parent / "page"  # the page, its script and its style
REFRESH_S = 1.0  # the page's update period (the issue asks for at least once a second)
DEFAULT_PORT = 8765
LOOPBACK = "127.0.0.1"


class ViewAddressError(ValueError):
    """The view cannot listen where asked: the message says why and what to do instead."""


def check_address(host: str, port: int) -> socket.AddressFamily:
    """The address family of host, or ViewAddressError: what the CLI checks before anything starts."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError as error:
        raise ViewAddressError(f"view address {host!r} is not an IP address ({LOOPBACK} by default)") from error
    if not 0 <= port <= 65535:
        raise ViewAddressError(f"view port {port} is not a port (0-65535; 0 lets the system choose)")
    return family


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or ViewAddressError naming the fix (a port in use, an
    address that is not this machine's)."""
    sock = socket.socket(check_address(host, port), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno == 98:  # EADDRINUSE
            raise ViewAddressError(
                f"view port {port} on {host} is in use (another view, or another program: `ss -ltnp 'sport = "
                f":{port}'` names it): stop it, or pick a free port with --view-port N (0 lets the system choose)"
            ) from error
        raise ViewAddressError(f"the view cannot listen on {host}:{port}: {error.strerror}") from error
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


def address_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def exposure_warning(host: str) -> str | None:
    """What to say when the view listens beyond this machine: nothing, for a loopback address."""
    if host == "localhost" or ipaddress.ip_address(host).is_loopback:
        return None
    return (f"warning: the view listens on {host}, reachable from other machines: the page is read-only, but it "
            f"shows the whole run to anyone who can reach it")


def plotly_js() -> Path:
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the plotly package is missing (make setup installs it): the page draws with its JavaScript")
    return Path(list(spec.submodule_search_locations)[0]) / "package_data" / "plotly.min.js"


class BadQuery(ValueError):
    """A query parameter the address does not take, or a value it cannot use: a 400 naming it."""


def _cursor(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{text!r} is not a whole number >= 0 (the cursor of the last answer; 0: everything)")
    return int(text)


QUERIES = {"/api/records": {"cursor": _cursor}, "/api/stream": {}}  # each address's parameters, read by _query


def _query(request) -> dict:
    """The request's parameters, read by their address's readers (QUERIES), or BadQuery naming the
    first one that is unknown, repeated or unreadable: a page's mistake is said to it, not logged
    as the server's crash."""
    readers, given, query = QUERIES[request.url.path], request.query_params, {}
    for name in given:
        if name not in readers:
            raise BadQuery(f"{name}: not a parameter of {request.url.path} (it takes: {', '.join(readers) or 'none'})")
        if len(given.getlist(name)) > 1:
            raise BadQuery(f"{name}: given {len(given.getlist(name))} times (once at most)")
        try:
            query[name] = readers[name](given[name])
        except ValueError as error:
            raise BadQuery(f"{name}: {error}") from None
    return query


def _with_query(handler):
    """`handler(request, query)` for an address of QUERIES; a bad query is answered 400 with one
    line of JSON naming the parameter."""
    async def answer(request):
        try:
            query = _query(request)
        except BadQuery as error:
            from starlette.responses import JSONResponse

            return JSONResponse({"error": str(error)}, status_code=400)
        return await handler(request, query)
    return answer


def build_app(state: RunState):
    """The Starlette app serving `state`; `app.state.stopping()` tells the streams to send their last update."""
    from starlette.applications import Starlette
    from starlette.responses import FileResponse, JSONResponse, StreamingResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    script = plotly_js()

    async def page(_request):
        return FileResponse(PAGE / "index.html")

    async def plotly(_request):
        return FileResponse(script, media_type="text/javascript")

    async def records(request, query):
        state.refresh()
        changed, cursor = state.store.since(query.get("cursor", 0))
        return JSONResponse({"records": changed, "cursor": cursor, "run_dir": str(state.run_dir)})

    async def stream(request, _params):
        """What changed, once a second. The folder is read only while a page watches: with none
        open, the view costs the run nothing. On the server's stop: the run's last words
        (summary.json, run.json's end), then an `end` event."""
        async def changes():
            cursor = 0
            while True:
                stopping = app.state.stopping()
                state.refresh()
                changed, cursor = state.store.since(cursor)
                if changed:
                    yield f"data: {json.dumps({'records': changed, 'cursor': cursor})}\n\n"
                if stopping:
                    yield "event: end\ndata: {}\n\n"
                    return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(REFRESH_S)
        return StreamingResponse(changes(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    app = Starlette(routes=[Route("/", page), Route("/plotly.min.js", plotly), Route("/api/records", _with_query(records)),
                            Route("/api/stream", _with_query(stream)), Mount("/page", StaticFiles(directory=PAGE))])
    app.state.stopping = lambda: False
    return app


def serve(state: RunState, sock: socket.socket) -> None:
    """Serve until SIGINT or SIGTERM; open streams get the final update before the server exits."""
    import uvicorn

    app = build_app(state)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=3, access_log=False))
    app.state.stopping = lambda: server.should_exit
    server.run(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--fd", type=int, help="a listening socket inherited from the harness")
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    from testbed.view.state import NotARun, RunState

    try:
        state = RunState(args.run_dir)
        sock = socket.socket(fileno=args.fd) if args.fd is not None else bind(args.host, args.port)
    except (NotARun, ViewAddressError) as error:
        print(f"view: {error}", file=sys.stderr)
        return 2
    if args.fd is not None:
        os.nice(10)  # live: the run's own processes come first
    serve(state, sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
