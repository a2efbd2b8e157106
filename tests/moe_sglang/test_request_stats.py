"""Per-request speculation counts (moe_sglang/request_stats.py) and how their summary rides SGLang's responses
(moe_sglang/stats_output.py), without an engine: the engine path is covered by tests/gateway/test_openai_sdk.py."""

import asyncio
import json

from moe_sglang.request_stats import RequestStatsBook, merge_summaries
from moe_sglang.stats_output import META_KEY, FinishedSummaries, _filed, _stream_with_summary
from service.policy import ShadowOutcome


def test_summary_follows_vllm_definitions():
    book = RequestStatsBook()
    book.record_step(["a", "b"], ["cascade", "static"], [3, 0], [2, 0], [1, 0])
    book.record_step(["a", "b"], ["cascade", "static"], [2, 0], [2, 0], [2, 0])
    book.record_step(["a"], ["cascade"], [3], [0], [0])  # K = 3 but the drafter found nothing: not a spec step
    a = book.finish("a", decode_tokens=6)  # 2 + 3 + 1 tokens
    assert a == {
        "mean_acceptance_length": 1 + 3 / 2,
        "draft_acceptance_rate": 3 / 4,
        "acceptance_histogram": [0, 1, 1, 0],
        "num_spec_steps": 2,
        "num_draft_tokens": 4,
        "num_accepted_draft_tokens": 3,
        "num_spec_tokens": 3,
        "policy": "cascade",
        "k_chosen_histogram": [0, 0, 1, 2],
        "num_decode_steps": 3,
        "num_steps_k0": 0,
        "num_shadow_drafts": 0,
        "num_shadow_accepted_drafts": 0,
        "num_steps_resting": 0,
        "expert_reuse": None,
    }
    assert "a" not in book._live and len(book) == 1


def test_expert_reuse_is_the_mean_over_the_plain_steps_that_measured_it():
    book = RequestStatsBook()
    book.record_step(["a", "b"], ["moe-serve"] * 2, [0, 0], [0, 0], [0, 0], [None, 0.5])  # a's first plain step
    book.record_step(["a", "b"], ["moe-serve"] * 2, [0, 0], [0, 0], [0, 0], [1.0, 0.25])
    book.record_step(["a", "b"], ["moe-serve"] * 2, [2, 0], [2, 0], [1, 0])  # a verify step: nothing measured
    a, b = book.finish("a", decode_tokens=4), book.finish("b", decode_tokens=3)
    assert a["expert_reuse"] == 1.0 and b["expert_reuse"] == 0.375
    assert merge_summaries([a, b])["expert_reuse"] == (1.0 + 0.375) / 2


def test_request_that_never_speculates_counts_all_steps_at_k0():
    book = RequestStatsBook()
    for step in range(4):
        book.record_step(["off"], ["moe-serve"], [0], [0], [0], resting=[step > 1])
    off = book.finish("off", decode_tokens=4)
    assert off["num_steps_resting"] == 2 and merge_summaries([off, off])["num_steps_resting"] == 4
    assert off["k_chosen_histogram"] == [4] and off["num_steps_k0"] == 4 and off["num_decode_steps"] == 4
    assert off["num_spec_steps"] == 0 and off["mean_acceptance_length"] == 1.0 and off["draft_acceptance_rate"] == 0.0
    # an engine without speculation never records a step: every token after the first was one plain step
    plain = book.finish("never-seen", decode_tokens=7)
    assert plain["policy"] is None and plain["num_steps_k0"] == 7 and plain["num_decode_steps"] == 7


def test_drafts_judged_without_a_verify_are_counted_apart():
    book = RequestStatsBook()
    book.record_step(["off", "on"], ["moe-serve"] * 2, [0, 2], [0, 2], [0, 1])
    book.record_shadow([ShadowOutcome("off", 4, 3, 2), ShadowOutcome("gone", 4, 1, 0)])  # "gone" was never recorded
    book.record_shadow([ShadowOutcome("off", 4, 1, 1)])
    off = book.finish("off", decode_tokens=1)
    assert off["num_shadow_drafts"] == 4 and off["num_shadow_accepted_drafts"] == 3
    assert off["num_spec_steps"] == 0 and off["num_draft_tokens"] == 0  # verified drafts are another count
    assert merge_summaries([off, book.finish("on", 2)])["num_shadow_drafts"] == 4


def test_a_step_cut_short_by_the_end_adds_no_plain_steps():
    book = RequestStatsBook()
    book.record_step(["r"], ["static"], [3], [3], [3])  # 4 tokens, but max_tokens kept 2 of them
    assert book.finish("r", decode_tokens=2)["num_decode_steps"] == 1


def test_book_forgets_the_oldest_request_beyond_capacity():
    book = RequestStatsBook(capacity=2)
    book.record_step(["a", "b", "c"], ["static"] * 3, [1, 1, 1], [1, 1, 1], [1, 1, 1])
    assert len(book) == 2 and book.finish("a", 0)["policy"] is None


def test_merge_adds_counts_of_several_sequences():
    book = RequestStatsBook()
    book.record_step(["x", "y"], ["static", "static"], [2, 1], [2, 1], [2, 0])
    merged = merge_summaries([book.finish("x", 3), book.finish("y", 1)])
    assert (
        merged["num_spec_steps"] == 2 and merged["num_draft_tokens"] == 3 and merged["num_accepted_draft_tokens"] == 2
    )
    assert merged["acceptance_histogram"] == [1, 0, 1] and merged["k_chosen_histogram"] == [0, 1, 1]
    assert merged["mean_acceptance_length"] == 2.0


def _outputs(*items):
    async def gen():
        for item in items:
            yield item

    return gen()


def _drain(agen) -> list:
    async def run():
        return [x async for x in agen]

    return asyncio.run(run())


def test_generate_outputs_are_filed_under_the_response_rid_once_per_sequence():
    finished = FinishedSummaries()
    finished.expect("resp")
    summary = RequestStatsBook().finish("s", 2)
    outs = [
        {"meta_info": {"id": "seq-1"}},
        [{"meta_info": {"id": "seq-1", META_KEY: [summary]}}, {"meta_info": {"id": "seq-2", META_KEY: [summary]}}],
        {"meta_info": {"id": "seq-2", META_KEY: [summary]}},  # a final output sent again counts once
    ]
    assert _drain(_filed(_outputs(*outs), "resp", finished)) == outs
    assert finished.take("resp")["num_decode_steps"] == 4
    assert finished.take("resp") is None
    # a request no response waits for (e.g. /generate) is not kept
    assert _drain(_filed(_outputs(*outs), "other", finished)) == outs and finished.take("other") is None


def _sse(event) -> str:
    return (
        f"data: {event if isinstance(event, str) else json.dumps(event, separators=(',', ':'))}\n\n"  # SGLang: compact
    )


def test_summary_goes_into_the_final_usage_chunk():
    finished = FinishedSummaries()
    finished.expect("r")
    finished.put("r", "r", {"policy": "static"} | RequestStatsBook().finish("r", 1))
    head = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}
    chunks = [
        _sse({**head, "choices": [{"text": "a"}], "usage": None}),
        _sse({**head, "choices": [], "usage": {"completion_tokens": 2}}),
        _sse("[DONE]"),
    ]
    out = _drain(_stream_with_summary(_outputs(*chunks), "r", finished))
    assert out[0] == chunks[0] and out[2] == chunks[2]
    usage = json.loads(out[1][len("data: ") :])
    assert usage["usage"] == {"completion_tokens": 2}
    assert usage["metrics"]["speculative_decoding"]["num_decode_steps"] == 1


def test_summary_gets_its_own_chunk_when_no_usage_was_asked():
    finished = FinishedSummaries()
    finished.expect("r")
    finished.put("r", "r", RequestStatsBook().finish("r", 3))
    head = {"id": "chat-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [_sse({**head, "choices": [{"delta": {"content": "a"}}]}), _sse("[DONE]")]
    out = _drain(_stream_with_summary(_outputs(*chunks), "r", finished))
    assert len(out) == 3 and out[-1] == chunks[-1]
    own = json.loads(out[1][len("data: ") :])
    assert {k: own[k] for k in head} == head and own["choices"] == []
    assert own["metrics"]["speculative_decoding"]["num_steps_k0"] == 3
