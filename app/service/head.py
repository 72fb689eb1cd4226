"""HEAD: answered wherever GET is, as GET would be but with no body (RFC 9110 9.3.2).

FastAPI's routes take only the methods they name, so `HEAD /healthz` was a 405, and some
load balancers and uptime monitors check a service with HEAD. The request goes through
the app as a GET (its metrics, logs and auth as one); the answer keeps GET's headers,
Content-Length included, and drops the body (uvicorn would drop it too; an ASGI client
in tests would not).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGetMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
