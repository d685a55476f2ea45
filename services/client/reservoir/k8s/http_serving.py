"""Serving an aiohttp application (the extender's or the webhook's) on HOST:PORT, over
TLS when given a certificate, until cancelled."""

from __future__ import annotations

import asyncio
import ssl

from aiohttp import web

from reservoir.common import logs

log = logs.get_logger(__name__)


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def serve(
    app: web.Application, listen: str, *, name: str, tls_cert: str = "", tls_key: str = ""
) -> None:
    host, _, port = listen.rpartition(":")
    context = None
    if tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls_cert, tls_key or None)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host.strip("[]") or "0.0.0.0", int(port), ssl_context=context)
    await site.start()
    try:
        bound = runner.addresses[0]
        # The bound address: with port 0 this is how a test (or an operator) learns it.
        log.info(f"{name}_serving", address=f"{bound[0]}:{bound[1]}", tls=context is not None)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
