"""After admission: send to the engine, relay the answer (JSON or SSE), settle the token charge and metrics."""

from __future__ import annotations

import logging
import time

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
from service.gateway.sse import AbortOnDisconnectResponse, EngineEvent, sse
from service.gateway.state import GatewayState

CONTEXT_MARKERS = ("context length", "maximum context length")
logger = logging.getLogger(__name__)


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
        # completions logprobs need OpenAI's text offsets filled chunk by chunk: no chunk passes through unparsed
        self.rewrite_every_chunk = self.text_offsets is not None and logprobs_asked(body)
        self.rid = ticket.rid
        self.started = time.perf_counter()
        self.usage: dict | None = None
        self.spec_details: tuple[dict | None, dict | None] = (None, None)  # (SGLang's sglext, the plugin's summary)
        self._events = None  # the engine stream, once opened
        self._finished = False

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
        sglext, ours = event.pop("sglext", None), (event.get("metrics") or {}).get("speculative_decoding")
        if sglext is not None or ours is not None:  # a stream carries each in a chunk of its own
            self.spec_details = (sglext or self.spec_details[0], ours or self.spec_details[1])
        if not self.speculation.stats:
            event.pop("metrics", None)
        if self.text_offsets is not None and isinstance(event.get("choices"), list):
            fill_text_offsets(event["choices"], self.text_offsets)

    def _headers(self) -> dict[str, str]:
        return {**self.ticket.headers, "x-request-id": self.rid}

    async def _settle(self, status: int) -> None:
        """Free the request's room in flight; charge real usage instead of the estimate, refund fully when the engine
        produced nothing. Never raises: the answer is already decided, and a limits store that is down must not
        turn it into a broken response (the store queues what it could not apply, limits_outage.py)."""
        self.state.in_flight.release(self.ticket.lease)
        try:
            await self._charge(status)
        except Exception:
            logger.exception("settling request %s failed", self.rid)

    async def _charge(self, status: int) -> None:
        metrics = self.state.metrics
        metrics.requests.labels(self.tenant, self.endpoint, str(status)).inc()
        metrics.e2e.labels(self.tenant).observe(time.perf_counter() - self.started)
        metrics.observe_usage(self.tenant, self.usage)
        metrics.observe_spec(self.tenant, *self.spec_details)
        if self.usage is None and (status < 400 or status == 499):
            return  # tokens were generated but not counted (client left mid-stream): keep the reservation
        used = 0  # the engine refused or failed before any token
        if self.usage:
            used = int(self.usage.get("prompt_tokens") or 0) + int(self.usage.get("completion_tokens") or 0)
        tenant = self.ticket.tenant
        await self.state.limiter.adjust(
            tenant.name, tenant.rpm, tenant.tpm, used - self.ticket.charged_tokens, self.state.now_ms(), self.rid
        )

    async def complete(self) -> Response:
        metrics = self.state.metrics
        metrics.in_flight.labels(self.tenant).inc()
        try:
            payload = await self.state.engine.submit(self.endpoint, self._engine_body(), self.ticket.charged_tokens)
        except (EngineRejected, EngineUnavailable) as exc:
            error = engine_error(exc)
            await self._settle(error.status)
            raise error from exc
        finally:
            metrics.in_flight.labels(self.tenant).dec()
            self.state.in_flight.release(self.ticket.lease)  # also when the client left (cancelled) while waiting
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
        events = self.state.engine.stream(self.endpoint, self._engine_body(), self.ticket.charged_tokens)
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
            self.state.in_flight.release(self.ticket.lease)
            with anyio.CancelScope(shield=True):
                await events.aclose()
            raise
        self._events = events
        return AbortOnDisconnectResponse(
            self._relay(first, events),
            media_type="text/event-stream",
            headers=self._headers(),
            on_close=lambda: self._finish(done=False),
        )

    def _rewrite(self, data: dict, wants_usage: bool) -> bytes | None:
        """A chunk the gateway acts on (speculation stats, usage, logprobs offsets): what the client should see of it
        (None: nothing)."""
        self._shape(data)
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        if not wants_usage:
            data.pop("usage", None)
        # the per-request stats ride the final usage chunk, asked for usage or not
        if data.get("choices") or (wants_usage and "usage" in data) or "metrics" in data:
            return sse(data)
        return None

    async def _finish(self, done: bool) -> None:
        """Once per stream, whichever comes first: the relay's end or the response closing (a client that left
        before the relay started never runs the relay's own cleanup)."""
        if self._finished:
            return
        self._finished = True
        with anyio.CancelScope(shield=True):
            if not done:
                self.state.metrics.client_aborts.labels(self.tenant).inc()
            await self._events.aclose()  # a stream closed early aborts the engine request (engine_client.stream)
            self.state.metrics.in_flight.labels(self.tenant).dec()
            await self._settle(200 if done else 499)

    async def _relay(self, first: EngineEvent | None, events):
        """Token chunks go out as the engine wrote them (EngineEvent.plain); only chunks with an error, speculation
        stats or usage are parsed and rewritten. The per-token path is a byte scan, a clock read and one histogram."""
        wants_usage = bool(self.body.stream_options and self.body.stream_options.include_usage)
        clock = _TokenClock(self.state.metrics, self.tenant, self.started)
        done = False
        try:
            event = first
            while event is not None:
                if event.plain and not self.rewrite_every_chunk:
                    if event.has_choices:
                        clock.tick()
                        yield event.frame()
                elif event.is_error():
                    yield event.frame()  # the engine failed after tokens were sent; the client sees its error
                    break
                else:
                    frame = self._rewrite(event.data, wants_usage)
                    if frame is not None:
                        if event.data.get("choices"):
                            clock.tick()
                        yield frame
                event = await anext(events, None)
            yield sse("[DONE]")
            done = True
        except EngineUnavailable as exc:
            yield sse(error_body(503, f"Engine failed mid-stream: {exc}", "engine_unavailable"))
            yield sse("[DONE]")
            done = True
        finally:
            await self._finish(done)


class _TokenClock:
    """TTFT at the first streamed token, inter-token latency after it (the histogram child looked up once)."""

    def __init__(self, metrics, tenant: str, started: float) -> None:
        self.metrics, self.tenant, self.started = metrics, tenant, started
        self.itl = metrics.itl.labels(tenant)
        self.last: float | None = None

    def tick(self) -> None:
        now = time.perf_counter()
        if self.last is None:
            self.metrics.ttft.labels(self.tenant).observe(now - self.started)
        else:
            self.itl.observe(now - self.last)
        self.last = now
