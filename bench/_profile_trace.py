"""Reading a torch profiler trace of the engine's scheduler process into time buckets per scheduler iteration
(bench/step_profile.py's module docstring says what each bucket holds)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from bench._models import MoeCheckpoint

BUCKETS = (
    "attention",
    "sgl_kernel_other",
    "expert_gemm",
    "dense_gemm",
    "torch_other",
    "forward_glue",
    "draft_model",
    "spec_glue",
    "scheduler",
)
# our attention ops, and torch's fused kernel where moe_sglang/target_forward.py calls it without them (only a
# top-level operator is counted: inside our ops the kernel is not one)
ATTENTION_OPS = (
    "sgl_kernel::decode_attention_cpu",
    "sgl_kernel::extend_attention_cpu",
    "aten::scaled_dot_product_attention",
    "moe_serve::decode_attention",  # a decode's whole attention sublayer, its QKV and output products included
)
STREAM_OP = "moe_serve::stream_linear"  # service/kernels/stream_gemm.py: (x, w, isa), w [out, in]
GEMM_OPS = ("aten::linear", "aten::matmul", "aten::mm", "aten::addmm", STREAM_OP)
# a MoE layer's whole expert forward in one call (stream_gemm.stream_moe: products, activation, combine); the decode
# MoE op (service/kernels/decode_moe.py) adds the norm, router and routing (microseconds) around the same forward
MOE_OPS = ("moe_serve::stream_moe", "moe_serve::decode_moe")
MOE_EXPERT = "moe_serve::stream_moe_expert"  # its event per expert hit, inputs (rows [m, H], w13 [2I, H], w2 [H, I])


def _top_level(ops: list[dict]) -> list[dict]:
    """Operators not nested inside another operator (the trace is one thread: nesting = interval containment)."""
    out, end = [], -1.0
    for op in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
        if op["ts"] >= end:
            out.append(op)
            end = op["ts"] + op["dur"]
    return out


def _weight_shape(op: dict, ckpt: MoeCheckpoint | None = None) -> tuple[int, int] | None:
    """[out, in] of the weight a product reads: F.linear's second operand, x @ W^T's right one, or, for the CPU
    engine's weight-major form (service/kernels/small_gemm.py: W @ x^T), a left operand shaped like an expert's."""
    dims = (op.get("args") or {}).get("Input Dims") or []
    if op["name"] in ("aten::linear", STREAM_OP) and len(dims) >= 2 and len(dims[1]) == 2:
        return tuple(dims[1])  # [out, in]
    if op["name"] in ("aten::mm", "aten::matmul", "aten::addmm") and len(dims) >= 2:
        if ckpt is not None and op["name"] != "aten::addmm" and tuple(dims[0]) in _expert_shapes(ckpt):
            return tuple(dims[0])  # W @ x^T
        b = dims[-1] if op["name"] != "aten::addmm" else dims[2]
        if len(b) == 2:
            return (b[1], b[0])  # x @ W^T: the weight read is [in, out] transposed
    return None


def classify(op: dict, ckpt: MoeCheckpoint) -> str:
    name = op["name"]
    if name in ATTENTION_OPS:
        return "attention"
    if name.startswith("sgl_kernel::"):
        return "sgl_kernel_other"
    if name in MOE_OPS:
        return "expert_gemm"
    if name in GEMM_OPS:
        shape = _weight_shape(op, ckpt)
        if shape in _expert_shapes(ckpt):
            return "expert_gemm"
        if shape is not None and min(shape) > 1:
            return "dense_gemm"
    return "torch_other"


def _expert_shapes(ckpt: MoeCheckpoint) -> set[tuple[int, int]]:
    return {(2 * ckpt.intermediate, ckpt.hidden), (ckpt.hidden, ckpt.intermediate)}


def analyse_trace(path: Path, ckpt: MoeCheckpoint) -> dict:
    """Mean ms per scheduler iteration in each bucket, plus the weight bytes the target's products read.

    SGLang's CPU event loop annotates each model forward `step[MODE bs=N ...]` (inside `scheduler.run_batch`). A plain
    engine runs one per iteration, which then runs from one model step to the next (result processing, streaming and
    batch building included); a speculative one runs draft forwards (`step[DRAFT ...]`) and a verify
    (`step[VERIFY ...]`) inside one `scheduler.run_batch`, and its iteration runs from one run_batch to the next."""
    with gzip.open(path) as trace:
        events = [e for e in json.load(trace)["traceEvents"] if e.get("ph") == "X"]
    notes = [e for e in events if e.get("cat") == "user_annotation"]
    steps = sorted((e for e in notes if e["name"].startswith("step[")), key=lambda e: e["ts"])
    runs = sorted((e for e in notes if e["name"] == "scheduler.run_batch"), key=lambda e: e["ts"])
    top = _top_level([e for e in events if e.get("cat") == "cpu_op"])
    fused = [e for e in events if e.get("name") == MOE_EXPERT]
    speculative = any(e["name"].startswith(("step[DRAFT", "step[VERIFY")) for e in steps)
    totals = dict.fromkeys(BUCKETS, 0.0)
    weight_bytes, batch_sizes = 0.0, []
    iterations = _spec_iterations(steps, runs) if speculative else _iterations(steps, runs)
    for i0, i1, run, spans in iterations:
        for span in spans:
            s0, s1 = span["ts"], span["ts"] + span["dur"]
            draft = span["name"].startswith("step[DRAFT")
            if not draft:
                match = re.search(r"bs=(\d+)", span["name"])
                batch_sizes.append(int(match.group(1)) if match else 0)
            in_ops = 0.0
            for op in top:
                if s0 <= op["ts"] < s1:
                    bucket = "draft_model" if draft else classify(op, ckpt)
                    totals[bucket] += op["dur"]
                    in_ops += op["dur"]
                    if bucket in ("expert_gemm", "dense_gemm") and op["name"] not in MOE_OPS:  # their hits: below
                        out_f, in_f = _weight_shape(op, ckpt)
                        weight_bytes += out_f * in_f * 4  # fp32 engine
            if not draft:
                weight_bytes += sum(_fused_expert_bytes(e) for e in fused if s0 <= e["ts"] < s1)
            totals["draft_model" if draft else "forward_glue"] += max(0.0, span["dur"] - in_ops)
        model = sum(span["dur"] for span in spans)
        if run is not None:
            totals["spec_glue"] += max(0.0, run["dur"] - model)
            totals["scheduler"] += (i1 - i0) - max(run["dur"], model)
        else:
            totals["scheduler"] += (i1 - i0) - model
    n = max(1, len(iterations))
    per_step = {k: v / n / 1e3 for k, v in totals.items()}  # µs -> ms
    step_ms = sum(per_step.values())
    return {
        "steps": len(iterations),
        "batch_sizes": sorted(set(batch_sizes)),
        "step_ms": step_ms,
        **{f"{k}_ms": v for k, v in per_step.items()},
        "weight_share": (per_step["expert_gemm"] + per_step["dense_gemm"]) / step_ms if step_ms else None,
        "weight_bytes": weight_bytes / n,
    }


# bytes per element of the profiler's input type names (the expert weights: float32, or bfloat16 where the engine
# keeps a bfloat16 checkpoint's experts so, EngineSettings.expert_weights)
_TYPE_BYTES = {"float": 4.0, "c10::BFloat16": 2.0, "c10::Half": 2.0, "double": 8.0}


def _fused_expert_bytes(event: dict) -> float:
    """Bytes of the two weights one expert hit of stream_moe read (its event's input dims: rows, w13, w2; their
    input types, float32 where the trace has none)."""
    args = event.get("args") or {}
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    sizes = [_TYPE_BYTES.get(types[i], 4.0) if i < len(types) else 4.0 for i in (1, 2)]
    return sum(size * d[0] * d[1] for size, d in zip(sizes, dims[1:3], strict=False) if len(d) == 2)


def _iterations(steps: list[dict], runs: list[dict]) -> list[tuple[float, float, dict | None, list[dict]]]:
    """(start, end, None, [model step]) per model step of a plain engine: to the next model step; the last one of a
    trace to the next run_batch (the profile stops inside it), or to its own end."""
    out = []
    for k, step in enumerate(steps):
        i0 = step["ts"]
        following = [r["ts"] for r in runs if r["ts"] >= i0 + step["dur"]]
        i1 = steps[k + 1]["ts"] if k + 1 < len(steps) else (following[0] if following else i0 + step["dur"])
        out.append((i0, i1, None, [step]))
    return out


def _spec_iterations(steps: list[dict], runs: list[dict]) -> list[tuple[float, float, dict | None, list[dict]]]:
    """(start, end, run_batch, [its model steps]) per run_batch holding a verify: to the next run_batch, the last one
    of a trace to its own end."""
    out = []
    for k, run in enumerate(runs):
        r0, r1 = run["ts"], run["ts"] + run["dur"]
        spans = [s for s in steps if r0 <= s["ts"] < r1]
        if not any(s["name"].startswith("step[VERIFY") for s in spans):
            continue  # a prefill, or a step nobody speculated in
        out.append((r0, runs[k + 1]["ts"] if k + 1 < len(runs) else r1, run, spans))
    return out
