"""bench/_profile_trace.py on hand-made traces: a plain engine's iterations run from model step to model step, a
speculative engine's from run_batch to run_batch, its draft forwards and its own Python in buckets of their own."""

import gzip
import json
from pathlib import Path

import pytest

from bench._models import MoeCheckpoint
from bench._profile_trace import analyse_trace

CKPT = MoeCheckpoint(Path("m"), num_experts=8, top_k=2, num_layers=1, hidden=4, intermediate=6, context=64)
EXPERT = [[1, 4], [12, 4]]  # aten::linear input dims: x [1, H], an expert's w1/w3 [2I, H]


def note(name, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur}


def op(name, ts, dur, dims=None):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "args": {"Input Dims": dims or []}}


def trace(tmp_path, events) -> Path:
    path = tmp_path / "t.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return path


def test_a_speculative_iteration_splits_draft_verify_and_its_own_python(tmp_path):
    events = [
        note("scheduler.run_batch", 0, 1000),
        note("step[DRAFT bs=1]", 100, 100),
        op("aten::linear", 110, 50, EXPERT),  # inside the draft: the draft's, whatever its shape
        note("step[DRAFT bs=1]", 250, 100),
        note("step[VERIFY bs=1]", 400, 500),
        op("aten::linear", 410, 200, EXPERT),
        op("aten::add", 620, 100),
        note("scheduler.run_batch", 1200, 10),  # the next iteration: a prefill, no verify
        note("step[EXTEND bs=1 toks=4]", 1201, 5),
    ]
    row = analyse_trace(trace(tmp_path, events), CKPT)
    assert row["steps"] == 1 and row["batch_sizes"] == [1]
    ms = {k: row[f"{k}_ms"] * 1e3 for k in ("draft_model", "expert_gemm", "torch_other", "forward_glue")}
    assert ms == pytest.approx({"draft_model": 200, "expert_gemm": 200, "torch_other": 100, "forward_glue": 200})
    assert row["spec_glue_ms"] * 1e3 == pytest.approx(1000 - 700)  # run_batch outside the model forwards
    assert row["scheduler_ms"] * 1e3 == pytest.approx(200)  # to the next run_batch
    assert row["step_ms"] * 1e3 == pytest.approx(1200)


def test_a_plain_iteration_runs_from_model_step_to_model_step(tmp_path):
    events = [
        note("scheduler.run_batch", 0, 600),
        note("step[DECODE bs=2]", 100, 400),
        op("aten::linear", 110, 300, EXPERT),
        note("scheduler.run_batch", 1000, 600),
        note("step[DECODE bs=2]", 1100, 400),
    ]
    row = analyse_trace(trace(tmp_path, events), CKPT)
    assert row["steps"] == 2 and row["batch_sizes"] == [2]
    assert row["draft_model_ms"] == 0 and row["spec_glue_ms"] == 0
    assert row["expert_gemm_ms"] * 1e3 == pytest.approx(150)  # 300 over two iterations
    assert row["scheduler_ms"] * 1e3 == pytest.approx(600 / 2)  # to the next step; the last one: none follows


def test_weight_major_expert_products_count_as_experts(tmp_path):
    events = [
        note("scheduler.run_batch", 0, 600),
        note("step[DECODE bs=1]", 100, 400),
        op("aten::mm", 110, 100, [[12, 4], [4, 2]]),  # W @ x^T (small_gemm's weight-major form, one row doubled)
        op("aten::mm", 220, 50, [[1, 6], [6, 4]]),  # x @ W^T of the down projection [H, I]
        op("aten::mm", 280, 30, [[2, 4], [4, 12]]),  # a left operand not shaped like an expert: x @ W^T
        note("scheduler.run_batch", 1000, 600),
        note("step[DECODE bs=1]", 1100, 400),
    ]
    row = analyse_trace(trace(tmp_path, events), CKPT)
    assert row["expert_gemm_ms"] * 1e3 == pytest.approx((100 + 50 + 30) / 2)
    assert row["weight_bytes"] == pytest.approx((12 * 4 + 4 * 6 + 12 * 4) * 4 / 2)


def test_stream_kernel_products_count_as_experts(tmp_path):
    events = [
        note("scheduler.run_batch", 0, 600),
        note("step[DECODE bs=1]", 100, 400),
        op("moe_serve::stream_linear", 110, 100, [[3, 4], [12, 4], []]),  # x [m, H], w1/w3 [2I, H], isa
        op("moe_serve::stream_linear", 220, 40, [[3, 6], [4, 6], []]),  # the down projection [H, I]
        note("scheduler.run_batch", 1000, 600),
        note("step[DECODE bs=1]", 1100, 400),
    ]
    row = analyse_trace(trace(tmp_path, events), CKPT)
    assert row["expert_gemm_ms"] * 1e3 == pytest.approx((100 + 40) / 2)
    assert row["weight_bytes"] == pytest.approx((12 * 4 + 4 * 6) * 4 / 2)


def test_the_fused_moe_counts_as_experts_with_the_weights_of_each_expert_hit(tmp_path):
    events = [
        note("scheduler.run_batch", 0, 600),
        note("step[DECODE bs=1]", 100, 400),
        op("moe_serve::stream_moe", 110, 150, [[1, 4], [8, 12, 4], [8, 4, 6], [1, 2], [1, 2], [], [], []]),
        # its events per expert hit (nested: not operators of their own), rows + the expert's w13 and w2
        {**op("moe_serve::stream_moe_expert", 120, 60, [[1, 4], [12, 4], [4, 6]]), "cat": "user_annotation"},
        {**op("moe_serve::stream_moe_expert", 190, 60, [[1, 4], [12, 4], [4, 6]]), "cat": "user_annotation"},
        note("scheduler.run_batch", 1000, 600),
        note("step[DECODE bs=1]", 1100, 400),
    ]
    row = analyse_trace(trace(tmp_path, events), CKPT)
    assert row["expert_gemm_ms"] * 1e3 == pytest.approx(150 / 2)
    assert row["weight_bytes"] == pytest.approx(2 * (12 * 4 + 4 * 6) * 4 / 2)
    # bfloat16 expert weights (EngineSettings.expert_weights) read half the bytes: the event's input types say so
    for event in events:
        if event["name"] == "moe_serve::stream_moe_expert":
            event["args"]["Input type"] = ["float", "c10::BFloat16", "c10::BFloat16"]
    row = analyse_trace(trace(tmp_path, events), CKPT)
    assert row["weight_bytes"] == pytest.approx(2 * (12 * 4 + 4 * 6) * 2 / 2)
