"""aiohttp application: routes, error middleware and request metrics.

Handlers are thin: read the body, decode the wire format, ask the coordinator, encode the answer.
Nothing a client sends can crash the server or produce a 500:

- a body that does not decode is HTTP 400 with a JSON ``{"error": ...}`` body;
- a declared ``Content-Length`` over the limit is refused at once, before reading anything;
- a body that has not fully arrived within ``body_timeout`` seconds is cut off (HTTP 408), so a
  client cannot hold a request open by declaring more bytes than it sends;
- a client that disconnects mid-request is logged at debug level and counted as
  ``outcome="disconnected"``, not as an error.

Refused and timed-out requests close the connection: their unread body must not be taken for the
next request on a keep-alive connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..cluster.cache import ClusterCache
from ..gang.coordinator import Coordinator
from ..metrics import Metrics
from . import wire
from .tls import peer_names

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Long enough for a 32 MiB body over a slow link; short enough that a stalled client is let go.
DEFAULT_BODY_TIMEOUT_SECONDS = 10.0

COORDINATOR = web.AppKey("coordinator", Coordinator)
CACHE = web.AppKey("cache", ClusterCache)
METRICS = web.AppKey("metrics", Metrics)
SCORES = web.AppKey("scores", wire.ScoreEncoder)
BODY_LIMIT = web.AppKey("body_limit", int)
BODY_TIMEOUT = web.AppKey("body_timeout", float)
# Candidate lists may exceed the cached node count by this much plus double it (nodes the watch has
# not delivered yet, a cache still filling at start).
MIN_CANDIDATE_LIMIT = 5000
ReadyCheck = Callable[[], bool]
READY: web.AppKey[ReadyCheck] = web.AppKey("ready")

_VERBS = {"/filter": "filter", "/prioritize": "prioritize", "/bind": "bind", "/preempt": "preempt"}


class BodyRefused(wire.WireError):
    """The body was not read (too large, or too slow); the connection is closed after the answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def _refusal(message: str, status: int) -> web.Response:
    response = _json(wire.error_body(message), status=status)
    response.force_close()
    return response


@web.middleware
async def errors_and_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
    verb = _VERBS.get(request.path)
    started = time.perf_counter()
    outcome = "error"
    try:
        response = await handler(request)
        outcome = response.headers.get("X-Quorum-Outcome", "ok") if verb else "ok"
        return response
    except BodyRefused as exc:
        outcome = "bad_request"
        return _refusal(str(exc), exc.status)
    except wire.WireError as exc:
        outcome = "bad_request"
        return _json(wire.error_body(str(exc)), status=400)
    except web.HTTPRequestEntityTooLarge as exc:  # a body without Content-Length that grew too large
        outcome = "bad_request"
        return _refusal(f"request body too large: {exc.text}", 400)
    except web.HTTPException as exc:
        outcome = "bad_request"
        return _json(wire.error_body(exc.reason), status=exc.status)
    except ConnectionError:
        # The client went away (kube-scheduler's httpTimeout, a restart): nothing to answer.
        outcome = "disconnected"
        log.debug("client disconnected", extra={"path": request.path})
        return _refusal("client disconnected", 400)
    except asyncio.CancelledError:  # handler_cancellation on, or shutdown with the request in flight
        outcome = "disconnected"
        log.debug("client disconnected; request cancelled", extra={"path": request.path})
        raise
    except Exception:
        log.exception("unexpected error", extra={"path": request.path})
        return _json(wire.error_body("internal error; see the extender's log"), status=500)
    finally:
        if verb:
            request.app[METRICS].request_duration.labels(verb, outcome).observe(time.perf_counter() - started)


async def _body(request: web.Request) -> bytes:
    """The whole body, refused unread when declared over the limit, cut off when too slow."""
    limit = request.app[BODY_LIMIT]
    declared = request.content_length
    if declared is not None and declared > limit:
        raise BodyRefused(f"request body too large: {declared} bytes declared, limit {limit}")
    timeout = request.app[BODY_TIMEOUT]
    try:
        async with asyncio.timeout(timeout):
            return await request.read()
    except TimeoutError:
        raise BodyRefused(f"request body not received within {timeout:g}s", status=408) from None


def _extender_args(request: web.Request, body: bytes, verb: str) -> wire.ExtenderArgs:
    """Parsed filter/prioritize arguments, refusing more candidates than the cluster could offer.

    kube-scheduler offers each feasible node once, so a list far longer than the cluster's nodes is
    not a scheduling request; refusing it keeps every call's work proportional to the cluster.
    """
    args = wire.parse_extender_args(body)
    limit = 2 * len(request.app[CACHE].nodes) + MIN_CANDIDATE_LIMIT
    if len(args.candidate_names) > limit:
        raise wire.WireError(f"{len(args.candidate_names)} candidate nodes offered; the cluster has "
                             f"{len(request.app[CACHE].nodes)} (at most {limit} accepted)")
    request.app[METRICS].node_forms.labels(verb, "names" if args.nodes is None else "objects").inc()
    return args


async def handle_filter(request: web.Request) -> web.Response:
    args = _extender_args(request, await _body(request), "filter")
    decision = request.app[COORDINATOR].filter(args.pod, args.declared_gang, args.candidate_names)
    response = _json(wire.filter_answer(args, decision))
    response.headers["X-Quorum-Outcome"] = "pass" if decision.passing else "reject"
    return response


async def handle_prioritize(request: web.Request) -> web.Response:
    args = _extender_args(request, await _body(request), "prioritize")
    table = request.app[COORDINATOR].prioritize(args.pod, args.candidate_names)
    return _json(request.app[SCORES].encode(args.candidate_names, table))


async def handle_bind(request: web.Request) -> web.Response:
    args = wire.parse_binding_args(await _body(request))
    error = await request.app[COORDINATOR].bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
    response = _json(wire.binding_result(error))
    response.headers["X-Quorum-Outcome"] = "error" if error else "ok"
    return response


async def handle_preempt(request: web.Request) -> web.Response:
    args = wire.parse_preemption_args(await _body(request))
    victims = request.app[COORDINATOR].preempt(args.pod, args.victims)
    return _json(wire.preemption_result(args, victims))


async def handle_healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def handle_readyz(request: web.Request) -> web.Response:
    if request.app[READY]():
        return web.Response(text="ok")
    synced = request.app[CACHE].synced
    waiting = ", ".join(kind for kind, done in synced.items() if not done)
    return web.Response(text=f"caches not synced: {waiting}", status=503)


async def handle_metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def handle_debug_gangs(request: web.Request) -> web.Response:
    doc = request.app[COORDINATOR].debug_document()
    return _json(orjson.dumps(doc, option=orjson.OPT_INDENT_2))


def client_names_check(allowed: frozenset[str]) -> Middleware:
    """With mTLS, only a client certificate naming one of ``allowed`` may call the verbs (403)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in _VERBS:
            names = peer_names(request.transport.get_extra_info("peercert") if request.transport else None)
            if not names & allowed:
                log.warning("verb refused: client certificate not allowed",
                            extra={"path": request.path, "client": sorted(names)})
                return _json(wire.error_body(
                    f"client certificate {sorted(names) or 'absent'} may not call the verbs"), status=403)
        return await handler(request)

    return check


def build_app(
    coordinator: Coordinator,
    cache: ClusterCache,
    metrics: Metrics,
    ready: Callable[[], bool],
    max_request_bytes: int,
    body_timeout: float = DEFAULT_BODY_TIMEOUT_SECONDS,
    *,
    verbs: bool = True,
    observability: bool = True,
    client_names: tuple[str, ...] = (),
) -> web.Application:
    """The verbs and/or the operations endpoints (``/metrics``, ``/debug/gangs``); health on both.

    ``listen.metricsPort`` serves the operations on a port of their own, so the verbs' port can
    require client certificates while a Prometheus scrape does not."""
    middlewares: list[Middleware] = [errors_and_metrics]
    if client_names:
        middlewares.append(client_names_check(frozenset(client_names)))
    app = web.Application(middlewares=middlewares, client_max_size=max_request_bytes)
    app[BODY_LIMIT] = max_request_bytes
    app[BODY_TIMEOUT] = body_timeout
    app[COORDINATOR] = coordinator
    app[CACHE] = cache
    app[METRICS] = metrics
    app[READY] = ready
    app[SCORES] = wire.ScoreEncoder(cache.nodes.__contains__, lambda: 2 * len(cache.nodes) + 1024)
    if verbs:
        app.router.add_post("/filter", handle_filter)
        app.router.add_post("/prioritize", handle_prioritize)
        app.router.add_post("/bind", handle_bind)
        app.router.add_post("/preempt", handle_preempt)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    if observability:
        app.router.add_get("/metrics", handle_metrics)
        app.router.add_get("/debug/gangs", handle_debug_gangs)
    return app
