"""The admin HTTP server (aiohttp) on ``admin.listener``, started and stopped with the broker.

Routes::

    GET /                                the web view (one self-contained page, no external assets)
    GET /metrics                         Prometheus text format
    GET /api/broker                      node id, cluster id, version, listeners
    GET /api/groups                      every group: state, protocol, members, lag, assignment health
    GET /api/groups/<group>              members with their subscriptions and assignments, lag per
                                         partition, assignment health
    GET /api/groups/<group>/history      the rebalance timeline (generations, the rebalance in progress)
"""

from __future__ import annotations

import asyncio
import importlib.resources
import logging
import socket
from typing import TYPE_CHECKING, Any

from regroup.broker.config import parse_admin_listener
from regroup.broker.context import BrokerPort
from regroup.broker.ops.looplag import LoopLagMonitor
from regroup.broker.ops.metrics import BrokerCollector, Families, build_collector
from regroup.broker.server import BrokerServer
from regroup.runtime.group_view import GroupView

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["AdminServer"]

log = logging.getLogger("regroup.broker.ops")


def _page() -> bytes:
    return importlib.resources.files("regroup.broker.ops").joinpath("static/index.html").read_bytes()


class AdminServer:
    """The broker's operator HTTP port; :attr:`address` is the bound (host, port) once started."""

    def __init__(self, broker: BrokerPort, server: BrokerServer) -> None:
        self._broker = broker
        self._server = server
        self._runner: web.AppRunner | None = None
        self._collector: BrokerCollector | None = None
        self._loop_lag: LoopLagMonitor | None = None
        self.address: tuple[str, int] | None = None

    @property
    def url(self) -> str | None:
        if self.address is None:
            return None
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def start(self) -> None:
        config = self._broker.config
        endpoint = parse_admin_listener(str(config.get("admin.listener") or ""))
        if endpoint is None:
            log.info("The admin HTTP port is disabled (admin.listener is empty)")
            return
        host, port = endpoint
        try:
            sock = socket.create_server(
                (host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET, backlog=128
            )
        except OSError as exc:
            if not config.is_default("admin.listener"):
                raise OSError(exc.errno, f"cannot bind admin.listener {host}:{port}: {exc.strerror}") from exc
            log.warning(
                "The admin HTTP port %s:%d is not available (%s); running without it "
                "(set admin.listener to another host:port, or to an empty value to disable it)",
                host,
                port,
                exc.strerror or exc,
            )
            return
        try:
            await self._serve(sock)
        except BaseException:
            sock.close()
            raise
        bound = sock.getsockname()
        self.address = (str(bound[0]), int(bound[1]))
        log.info("Admin HTTP port listening on %s (metrics at %s/metrics)", self.url, self.url)

    async def _serve(self, sock: socket.socket) -> None:
        from aiohttp import web

        self._loop_lag = LoopLagMonitor()
        self._loop_lag.start()
        self._collector, requests, stats = build_collector(self._broker, self._server, self._loop_lag)
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/api/broker", self._broker_info)
        app.router.add_get("/api/groups", self._groups)
        app.router.add_get("/api/groups/{group:.+}/history", self._history)
        app.router.add_get("/api/groups/{group:.+}", self._group)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.SockSite(runner, sock)
        await site.start()
        self._runner = runner
        self._server.request_observer = requests.observe
        self._broker.group_coordinator.add_observer(stats.on_event)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if self._loop_lag is not None:
            self._loop_lag.stop()
        if runner is not None:
            self._server.request_observer = None
            await runner.cleanup()

    # ------------------------------------------------------------------------------------ handlers

    async def _index(self, _request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        return web.Response(body=_page(), content_type="text/html", charset="utf-8")

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        """Prometheus exposition; ``name[]`` parameters select families (Prometheus' federation
        convention), so a scraper wanting one histogram does not pay for a lag series per committed offset.
        A scrape never holds the event loop for long: the groups are read a few at a time between other
        events, and the text is rendered in a worker thread."""
        from aiohttp import web
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        assert self._collector is not None
        names = frozenset(request.query.getall("name[]", [])) or None
        coord = self._broker.group_coordinator
        views = (
            await coord.group_views_async() if coord.running and self._collector.needs_views(names) else []
        )
        collector = self._collector
        live = collector.live_families(views, names)

        def render() -> bytes:
            return generate_latest(Families(live + collector.view_families(views, names)))

        body = await asyncio.to_thread(render)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _broker_info(self, _request: web.Request) -> web.StreamResponse:
        broker = self._broker
        listeners = {name: f"{h}:{p}" for name, (h, p) in broker.bound_addresses().items()}
        return _json(
            {
                "node_id": broker.node_id,
                "cluster_id": broker.cluster_id,
                "version": broker.version,
                "listeners": listeners,
                "now_ms": broker.clock.now_ms(),
            }
        )

    async def _groups(self, _request: web.Request) -> web.StreamResponse:
        return _json({"groups": [self._group_json(v, detail=False) for v in self._views()]})

    async def _group(self, request: web.Request) -> web.StreamResponse:
        group_id = request.match_info["group"]
        coord = self._broker.group_coordinator
        view = coord.group_view(group_id) if coord.running else None
        if view is None:
            return _json({"error": f"group {group_id} not found"}, status=404)
        return _json(self._group_json(view, detail=True))

    def _group_json(self, view: GroupView, *, detail: bool) -> dict[str, Any]:
        # The groups an admin port shows are the ones its node coordinates (in a cluster, each node's
        # __consumer_offsets partitions): it names itself as their coordinator.
        out = view.to_json(detail=detail)
        out["coordinator"] = self._broker.node_id
        return out

    async def _history(self, request: web.Request) -> web.StreamResponse:
        group_id = request.match_info["group"]
        coord = self._broker.group_coordinator
        # The rebalance timeline as the coordinator serves it: generations oldest first from
        # __group_events, and the live rebalance with the members it waits for.
        history = coord.history_view(group_id) if coord.running else None
        if history is None or (
            history.get("state") is None
            and not history.get("generations")
            and history.get("in_progress") is None
        ):
            return _json({"error": f"group {group_id} not found"}, status=404)
        return _json(history)

    def _views(self) -> list[GroupView]:
        coord = self._broker.group_coordinator
        return coord.group_views() if coord.running else []


def _json(data: Any, status: int = 200) -> web.StreamResponse:
    from aiohttp import web

    return web.json_response(data, status=status)
