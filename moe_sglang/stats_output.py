"""How a request's speculation summary (request_stats.py) leaves SGLang: `/generate`'s meta_info, and the OpenAI
endpoints' `metrics.speculative_decoding` (vLLM's field) for requests that set `return_spec_tokens_details`.

Path, and why this one:
1. scheduler process: SGLang's documented extension for per-request response fields (sglang/srt/sampling/
   sampling_observer.py, managers/auxiliary_output.py): `Scheduler.get_output_streamer_class` selects a
   `SchedulerOutputStreamer` subclass whose `build_additional_customized_info(reqs)` reads buffered per-request state.
   Ours emits the summary under META_KEY once, when the request finishes. SGLang carries it to the tokenizer manager,
   which accumulates it into meta_info[META_KEY] (a one-element list): `/generate` shows it with no further help.
   Writing `Req.customized_info` from the step instead would need the Req objects there, and a per-token list.
2. HTTP process: SGLang's OpenAI layer copies only the meta_info keys it knows, and its response models have fixed
   fields (a subclass's extra fields are not serialised), so two hooks carry the summary across:
   `TokenizerManager.generate_request` (the stream of outputs every endpoint reads) files each finished sequence's
   summary under the request id the response was asked with (SGLang gives the n > 1 sequences fresh ids of their
   own, so the id in meta_info cannot find them), and `OpenAIServingBase.handle_request` (the one entry of
   completions and chat, streamed or not) adds them to the response: top-level for a JSON answer, in the final usage
   chunk of a stream (a chunk of its own before `[DONE]` when the client asked for no usage). Parsing the stream's
   JSON chunks is the cost of not forking SGLang's two stream generators.
Not carried: streams of a server run with `--incremental-streaming-output` (SGLang slices customized fields per token
there, which drops a request-level summary), and the Rust egress (`SGLANG_RUST_SERVER`), which refuses customized
output: the summary is then absent, never wrong.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import OrderedDict

from moe_sglang.request_stats import RequestStatsBook, merge_summaries

logger = logging.getLogger(__name__)

META_KEY = "moe_serve_speculation"  # meta_info key of the summary (a one-element list: SGLang accumulates lists)
RESPONSE_KEY = ("metrics", "speculative_decoding")  # where the OpenAI response carries it (vLLM's place)
FINISHED_CAP = 4096  # summaries kept for responses not yet written (a client that left never claims its own)

# The SGLang names this module hooks, subclasses and calls are in touchpoints.py. Data fields it relies on, not
# resolvable as names: Req.rid/.finished_len/.output_ids (read); the OpenAI requests' `return_spec_tokens_details`
# (read) and `rid` (written when the client sent none); generate_request outputs' meta_info["id"] (read); a stream's
# `data: {...}` chunks and its final usage chunk (read, one rewritten).
STREAMER_CLASS = "sglang.srt.managers.scheduler.Scheduler.get_output_streamer_class"  # AROUND: our subclass
GENERATE = "sglang.srt.managers.tokenizer_manager.TokenizerManager.generate_request"  # AROUND: file summaries
HANDLE = "sglang.srt.entrypoints.openai.serving_base.OpenAIServingBase.handle_request"  # AROUND: add them to responses


def install(book: RequestStatsBook) -> list[str]:
    """Register the hooks of both sides for this process (each process uses its own side)."""
    from moe_sglang.touchpoints import hook

    finished = FinishedSummaries()
    hooks = {
        STREAMER_CLASS: _streamer_class_hook(book),
        GENERATE: _generate_request_hook(finished),
        HANDLE: _handle_request_hook(finished),
    }
    for target, fn in hooks.items():
        hook(target, fn, "around")
    return list(hooks)


# ---- scheduler process --------------------------------------------------------------------------------------------
def _streamer_class_hook(book: RequestStatsBook):
    subclasses: dict[type, type] = {}

    def around(original, scheduler):
        base = original(scheduler)
        if getattr(scheduler, "rust_server", None) is not None:
            logger.warning("per-request speculation stats are off: the Rust egress refuses customized output")
            return base
        if base not in subclasses:
            subclasses[base] = _stats_streamer(base, book)
        return subclasses[base]

    return around


def _stats_streamer(base: type, book: RequestStatsBook) -> type:
    class SpecStatsOutputStreamer(base):
        __slots__ = ()
        has_additional_customized_info = True

        def build_additional_customized_info(self, reqs) -> dict[str, list]:
            out = super().build_additional_customized_info(reqs)
            if not any(req.finished() for req in reqs):
                return out  # nothing to say this round: no key, no per-request lists to carry
            out[META_KEY] = [[book.finish(req.rid, _decode_tokens(req))] if req.finished() else [] for req in reqs]
            return out

    return SpecStatsOutputStreamer


def _decode_tokens(req) -> int:
    """Visible output tokens after the prefill's first one."""
    visible = req.finished_len if req.finished_len is not None else len(req.output_ids)
    return max(visible - 1, 0)


# ---- HTTP process -------------------------------------------------------------------------------------------------
class FinishedSummaries:
    """Response rid -> {sequence id: summary}, from the sequences finishing to the response being written. Only
    responses that will be written with a summary are expected (`expect`); other requests are not kept."""

    def __init__(self, capacity: int = FINISHED_CAP) -> None:
        self._by_rid: OrderedDict[str, dict[str, dict]] = OrderedDict()
        self._capacity = capacity

    def expect(self, rid: str) -> None:
        self._by_rid[rid] = {}
        while len(self._by_rid) > self._capacity:
            self._by_rid.popitem(last=False)

    def put(self, rid: str, sequence: str, summary: dict) -> None:
        if rid in self._by_rid:
            self._by_rid[rid][sequence] = summary  # keyed by sequence: a re-sent final output counts once

    def take(self, rid: str) -> dict | None:
        """The merged summary of the response's sequences, forgotten here; None if none finished."""
        found = self._by_rid.pop(rid, None)
        return merge_summaries(list(found.values())) if found else None


def _generate_request_hook(finished: FinishedSummaries):
    def around(original, manager, obj, *args, **kwargs):
        rid = getattr(obj, "rid", None)  # read before SGLang normalises it (n > 1 turns it into a list)
        outputs = original(manager, obj, *args, **kwargs)
        return _filed(outputs, rid, finished) if isinstance(rid, str) else outputs

    return around


async def _filed(outputs, rid: str, finished: FinishedSummaries):
    try:
        async for out in outputs:
            for item in out if isinstance(out, list) else [out]:
                meta_info = item.get("meta_info") if isinstance(item, dict) else None
                summaries = (meta_info or {}).get(META_KEY)
                if summaries:
                    finished.put(rid, str(meta_info.get("id")), summaries[-1])
            yield out
    finally:
        await outputs.aclose()


def _handle_request_hook(finished: FinishedSummaries):
    async def around(original, serving, request, raw_request, *args, **kwargs):
        if not getattr(request, "return_spec_tokens_details", False):
            return await original(serving, request, raw_request, *args, **kwargs)
        if getattr(request, "rid", None) is None:
            request.rid = uuid.uuid4().hex  # the id the summary will be filed under
        rid = request.rid
        if not isinstance(rid, str):
            return await original(serving, request, raw_request, *args, **kwargs)  # a client's list of ids: not ours
        finished.expect(rid)
        try:
            response = await original(serving, request, raw_request, *args, **kwargs)
        except BaseException:
            finished.take(rid)
            raise
        return _with_summary(response, rid, finished)

    return around


def _with_summary(response, rid, finished: FinishedSummaries):
    from pydantic import BaseModel
    from starlette.responses import Response, StreamingResponse

    if isinstance(response, StreamingResponse):
        response.body_iterator = _stream_with_summary(response.body_iterator, rid, finished)
        return response
    summary = finished.take(rid)
    if summary is None or not isinstance(response, BaseModel) or not hasattr(response, "usage"):
        return response  # an error answer, or a request that produced no summary
    data = json.loads(response.model_dump_json(by_alias=True))
    data.setdefault(RESPONSE_KEY[0], {})[RESPONSE_KEY[1]] = summary
    return Response(content=_json(data), media_type="application/json")


async def _stream_with_summary(chunks, rid, finished: FinishedSummaries):
    """SSE chunks (strings of `data: ...\\n\\n`) with the summary in the final usage chunk."""
    placed = False
    head: dict = {}  # id, object, created, model of the stream, for a chunk of our own
    try:
        async for chunk in chunks:
            text = chunk.decode() if isinstance(chunk, bytes) else chunk
            if not head and text.startswith("data: {"):
                head = _stream_head(text)
            if not placed and text.startswith("data: [DONE]"):
                summary = finished.take(rid)
                if summary is not None:
                    yield f"data: {_json({**head, 'choices': [], RESPONSE_KEY[0]: {RESPONSE_KEY[1]: summary}})}\n\n"
                placed = True
            elif not placed and '"choices":[]' in text and '"usage":{' in text:  # cheap test before parsing
                event = _usage_event(text)
                summary = None if event is None else finished.take(rid)
                if summary is not None:
                    event.setdefault(RESPONSE_KEY[0], {})[RESPONSE_KEY[1]] = summary
                    text, placed = f"data: {_json(event)}\n\n", True
            yield text
    finally:
        if not placed:
            finished.take(rid)  # the client left: nobody will ask for it
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()


def _json(payload: dict) -> str:
    return json.dumps(payload, separators=(",", ":"))  # as SGLang writes its own


def _stream_head(text: str) -> dict:
    try:
        event = json.loads(text[len("data: ") :])
    except ValueError:
        return {}
    return {k: event[k] for k in ("id", "object", "created", "model") if isinstance(event, dict) and k in event}


def _usage_event(text: str) -> dict | None:
    """The JSON of a stream's final usage chunk (usage set, no choices), else None."""
    if not text.startswith("data: "):
        return None
    try:
        event = json.loads(text[len("data: ") :])
    except ValueError:
        return None
    if isinstance(event, dict) and event.get("usage") and not event.get("choices"):
        return event
    return None
