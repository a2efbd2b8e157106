"""After admission: send to the engine, relay the answer (JSON or SSE), settle the token charge and metrics."""

from __future__ import annotations

import time
import uuid

import anyio
from fastapi.responses import JSONResponse, Response

from service.gateway.admission import Ticket
from service.gateway.engine_client import EngineRejected, EngineUnavailable
from service.gateway.errors import GatewayError, error_body
from service.gateway.hints import engine_body
from service.gateway.logprobs import asked as logprobs_asked
from service.gateway.logprobs import check_present, fill_text_offsets
from service.gateway.schemas import ChatCompletionRequest, CompletionRequest
from service.gateway.speculation import SpeculationGrant, grant
from service.gateway.sse import AbortOnDisconnectResponse, sse
from service.gateway.state import GatewayState

CONTEXT_MARKERS = ("context length", "maximum context length")


def engine_error(exc: EngineRejected | EngineUnavailable) -> GatewayError:
    if isinstance(exc, EngineUnavailable):
        return GatewayError(503, f"Engine unavailable: {exc}", code="engine_unavailable", headers={"Retry-After": "1"})
    if any(marker in exc.message for marker in CONTEXT_MARKERS):
        return GatewayError(413, exc.message, code="context_length_exceeded")
    status = exc.status if exc.status in (400, 404, 413, 422) else 400
    return GatewayError(400 if status == 422 else status, exc.message, code="engine_rejected")


class Relay:
    """One admitted request on its way through the engine."""

    def __init__(
        self,
        state: GatewayState,
        ticket: Ticket,
        endpoint: str,
        body: CompletionRequest | ChatCompletionRequest,
        speculation: SpeculationGrant | None = None,
    ):
        self.state = state
        self.ticket = ticket
        self.tenant = ticket.tenant.name
        self.endpoint = endpoint
        self.body = body
        self.speculation = speculation or grant(ticket.tenant, None)
        self.text_offsets: dict[int, int] | None = {} if isinstance(body, CompletionRequest) else None
        self.rid = f"moe-{uuid.uuid4().hex}"
        self.started = time.perf_counter()
        self.usage: dict | None = None

    def _engine_body(self) -> dict:
        return engine_body(
            self.body.engine_fields(),
            self.ticket.tenant,
            self.rid,
            forward_priority=self.state.config.engine.forward_priority,
            speculation=self.speculation,
        )

    def _shape(self, event: dict) -> None:
        """What the client sees of an engine answer or chunk: no SGLang extension, stats only when asked, OpenAI's
        text offsets."""
        self.state.metrics.observe_spec(self.tenant, event.pop("sglext", None))
        if not self.speculation.stats:
            event.pop("metrics", None)
        if self.text_offsets is not None and isinstance(event.get("choices"), list):
            fill_text_offsets(event["choices"], self.text_offsets)

    def _headers(self) -> dict[str, str]:
        return {**self.ticket.headers, "x-request-id": self.rid}

    async def _settle(self, status: int) -> None:
        """Charge real usage instead of the estimate; refund fully when the engine produced nothing."""
        metrics = self.state.metrics
        metrics.requests.labels(self.tenant, self.endpoint, str(status)).inc()
        metrics.e2e.labels(self.tenant).observe(time.perf_counter() - self.started)
        metrics.observe_usage(self.tenant, self.usage)
        if self.usage is None and (status < 400 or status == 499):
            return  # tokens were generated but not counted (client left mid-stream): keep the reservation
        used = 0  # the engine refused or failed before any token
        if self.usage:
            used = int(self.usage.get("prompt_tokens") or 0) + int(self.usage.get("completion_tokens") or 0)
        tenant = self.ticket.tenant
        await self.state.limiter.adjust(
            tenant.name, tenant.rpm, tenant.tpm, used - self.ticket.charged_tokens, self.state.now_ms()
        )

    async def complete(self) -> Response:
        metrics = self.state.metrics
        metrics.in_flight.labels(self.tenant).inc()
        try:
            payload = await self.state.engine.submit(self.endpoint, self._engine_body())
        except (EngineRejected, EngineUnavailable) as exc:
            error = engine_error(exc)
            await self._settle(error.status)
            raise error from exc
        finally:
            metrics.in_flight.labels(self.tenant).dec()
        self.usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else None
        self._shape(payload)
        metrics.ttft.labels(self.tenant).observe(time.perf_counter() - self.started)
        if logprobs_asked(self.body):
            try:
                check_present(payload.get("choices") or [])
            except GatewayError as error:
                await self._settle(error.status)
                raise
        await self._settle(200)
        return JSONResponse(payload, headers=self._headers())

    async def stream(self) -> Response:
        """Wait for the first engine event before answering, so failures before any token get a real status code."""
        metrics = self.state.metrics
        events = self.state.engine.stream(self.endpoint, self._engine_body())
        metrics.in_flight.labels(self.tenant).inc()
        try:
            first = await anext(events, None)
        except (EngineRejected, EngineUnavailable) as exc:
            metrics.in_flight.labels(self.tenant).dec()
            error = engine_error(exc)
            await self._settle(error.status)
            raise error from exc
        except BaseException:
            metrics.in_flight.labels(self.tenant).dec()
            with anyio.CancelScope(shield=True):
                await events.aclose()
            raise
        return AbortOnDisconnectResponse(
            self._relay(first, events), media_type="text/event-stream", headers=self._headers()
        )

    async def _relay(self, first: dict | None, events):
        metrics = self.state.metrics
        wants_usage = bool(self.body.stream_options and self.body.stream_options.include_usage)
        wants_stats = self.speculation.stats  # the stats ride the final usage chunk, asked for or not
        last_token_at: float | None = None
        done = False
        try:
            event = first
            while event is not None:
                if "error" in event or event.get("object") == "error":
                    yield sse(event)  # the engine failed after tokens were sent; the client sees its error
                    break
                self._shape(event)
                if isinstance(event.get("usage"), dict):
                    self.usage = event["usage"]
                if not wants_usage:
                    event.pop("usage", None)
                if event.get("choices"):
                    now = time.perf_counter()
                    if last_token_at is None:
                        metrics.ttft.labels(self.tenant).observe(now - self.started)
                    else:
                        metrics.itl.labels(self.tenant).observe(now - last_token_at)
                    last_token_at = now
                    yield sse(event)
                elif (wants_usage and "usage" in event) or (wants_stats and "metrics" in event):
                    yield sse(event)
                event = await anext(events, None)
            yield sse("[DONE]")
            done = True
        except EngineUnavailable as exc:
            yield sse(error_body(503, f"Engine failed mid-stream: {exc}", "engine_unavailable"))
            yield sse("[DONE]")
            done = True
        finally:
            with anyio.CancelScope(shield=True):
                if not done:
                    metrics.client_aborts.labels(self.tenant).inc()
                await events.aclose()  # a stream closed early aborts the engine request (engine_client.stream)
                metrics.in_flight.labels(self.tenant).dec()
                await self._settle(200 if done else 499)
