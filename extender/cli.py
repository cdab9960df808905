"""Process entry point: configuration, wiring, and the aiohttp server."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import AsyncIterator, Sequence

from aiohttp import web

from . import config as cfg
from . import logs
from .adapters import status
from .adapters.event_loop import chosen_loop, new_event_loop
from .adapters.heap_trim import heap_trimmer, trim_heap_periodically
from .adapters.informer import Informer
from .adapters.kube import Credentials, KubeClient, load_credentials
from .adapters.kueue_topology import read_levels
from .adapters.loop_lag import sample_loop_lag
from .adapters.server import build_app
from .adapters.tls import Reloader
from .adapters.token import TokenFile, TokenRequester, token_requester
from .cluster.cache import ClusterCache
from .gang.coordinator import Coordinator
from .metrics import Metrics

log = logging.getLogger("extender")
TLS_RELOADER = web.AppKey("tls_reloader", Reloader)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="quorum-extender",
        description="kube-scheduler HTTP extender for gang scheduling and topology-aware placement",
        epilog="'quorum-extender status --help': why each gang waits, read from a running Quorum",
    )
    parser.add_argument("--config", help="YAML configuration file")
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", help="listen port (default 8888)")
    parser.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster credentials)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", choices=["json", "text"])
    parser.add_argument("--bind-timeout", help="seconds a gang may take to reach quorum at bind")
    return parser.parse_args(argv)


def load_config(args: argparse.Namespace) -> cfg.Config:
    config = cfg.load_file(args.config) if args.config else cfg.Config()
    config = cfg.apply_overrides(config, cfg.env_overrides())
    return cfg.apply_overrides(
        config,
        {
            "host": args.host,
            "port": args.port,
            "kubeconfig": args.kubeconfig,
            "log_level": args.log_level,
            "log_format": args.log_format,
            "bind_timeout": args.bind_timeout,
        },
    )


def token_upkeep(config: cfg.Config, credentials: Credentials, client: KubeClient,
                 metrics: Metrics) -> TokenFile | TokenRequester | None:
    """In cluster: Quorum's own token asked for (``tokenRequest``), or the mounted one re-read."""
    if credentials.token_file is None:
        return None
    if config.token_request is not None:
        return token_requester(lambda: client.session, credentials.host, config.token_request,
                               client.set_token, lambda result: metrics.token_requests.labels(result).inc())
    return TokenFile(credentials.token_file,
                     credentials.headers.get("Authorization", "").removeprefix("Bearer ") or None,
                     client.set_token)


def build(config: cfg.Config) -> web.Application:
    credentials = load_credentials(config.kubeconfig)
    if config.kueue_topology:  # before the cache: the levels shape its node index
        config = dataclasses.replace(config, levels=read_levels(config.kubeconfig, config.kueue_topology))
    metrics = Metrics()
    client = KubeClient(credentials, metrics=metrics)
    cache = ClusterCache(tuple(level.node_label for level in config.levels))
    coordinator = Coordinator(config, cache, client, metrics)
    metrics.track_state(coordinator.phase_counts, cache.counts, coordinator.reserved_count,
                        coordinator.queue_counts)
    informer = Informer(client, cache, metrics, scale_ups=config.autoscaling.provisioning_requests)
    # Ready while every kind is listed and watched; the informer marks a kind whose watch is down
    # (or whose loop ended) out of sync, which names it in the 503 answer.
    separate = config.metrics_port > 0
    client_names = config.tls.client_names if config.tls else ()
    app = build_app(coordinator, cache, metrics, informer.healthy, config.max_request_bytes,
                    body_timeout=config.body_timeout_seconds, observability=not separate,
                    client_names=client_names)
    ops = build_app(coordinator, cache, metrics, informer.healthy, config.max_request_bytes,
                    body_timeout=config.body_timeout_seconds, verbs=False) if separate else None
    try:
        reloader = Reloader(config.tls) if config.tls else None
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise cfg.ConfigError(f"listen.tls: cannot load the certificate, key or CA: {exc}") from exc
    if reloader is not None:
        app[TLS_RELOADER] = reloader

    tokens_upkeep = token_upkeep(config, credentials, client, metrics)

    async def lifecycle(_: web.Application) -> AsyncIterator[None]:
        next_token = await tokens_upkeep.first() if tokens_upkeep is not None else 0.0
        informer.start()
        ops_host = config.metrics_host or config.host
        ops_runner = await serve_plain(ops, ops_host, config.metrics_port) if ops is not None else None
        reloads = asyncio.ensure_future(reloader.run()) if reloader is not None else None
        tokens = asyncio.ensure_future(tokens_upkeep.run(next_token)) if tokens_upkeep is not None else None
        lag = asyncio.ensure_future(sample_loop_lag(metrics.loop_lag.observe))
        trim = heap_trimmer()
        trims = asyncio.ensure_future(trim_heap_periodically(trim)) if trim is not None else None
        log.info("started", extra={"host": config.host, "port": config.port, "https": reloader is not None,
                                   "mtls": bool(config.tls and config.tls.client_ca_file),
                                   "metricsPort": config.metrics_port or config.port,
                                   "levels": [lvl.name for lvl in config.levels],
                                   "eventLoop": type(asyncio.get_running_loop()).__module__.split(".")[0]})
        yield
        for task in (reloads, tokens, lag, trims):
            if task is not None:
                task.cancel()
        if ops_runner is not None:
            await ops_runner.cleanup()
        await informer.stop()
        await client.close()

    app.cleanup_ctx.append(lifecycle)
    return app


async def serve_plain(app: web.Application, host: str, port: int) -> web.AppRunner:
    """The operations endpoints on their own port (plain HTTP, for Prometheus and probes)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["status"]:  # quorum-extender status: read a running Quorum, start nothing
        return status.main(words[1:])
    args = parse_args(words)
    try:
        config = load_config(args)
    except cfg.ConfigError as exc:
        print(f"quorum-extender: invalid configuration: {exc}", file=sys.stderr)
        return 2
    try:
        loop = new_event_loop(chosen_loop(os.environ))
    except ValueError as exc:
        print(f"quorum-extender: {exc}", file=sys.stderr)
        return 2
    asyncio.set_event_loop(loop)  # anything built below that asks for the loop gets this one
    logs.setup(config.log_level, config.log_format)
    try:
        app = build(config)
    except cfg.ConfigError as exc:
        print(f"quorum-extender: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # credentials that cannot be loaded: say so plainly and stop
        print(f"quorum-extender: cannot load Kubernetes credentials: {exc}", file=sys.stderr)
        return 2
    reloader = app.get(TLS_RELOADER)
    web.run_app(app, host=config.host, port=config.port, access_log=None, print=None, loop=loop,
                handle_signals=True, ssl_context=reloader.listener if reloader is not None else None)
    return 0
