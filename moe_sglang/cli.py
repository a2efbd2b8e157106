"""`moe-serve engine`: SGLang's HTTP server on the embedded default (CPU) or a GPU, with our plugin loaded."""

from __future__ import annotations

import argparse
import os

from moe_sglang.launch import DEFAULT_DRAFT_MODEL, DEFAULT_MODEL, SPEC_ALGORITHMS, EngineConfig, SpeculationConfig
from moe_sglang.settings import (
    BUDGET_MODES,
    CPU_ATTENTION,
    CPU_GEMM,
    DRAFT_FORWARD,
    DRAFT_THREAD,
    EXPERT_WEIGHTS,
    GEMM_PLAN,
    PROCESS_START,
    TARGET_FORWARD,
    VERIFY_LAYOUTS,
    EngineSettings,
)

METRICS_FLAG = "--enable-metrics"


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="HF checkpoint folder (default: bundled model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--dtype", default=None, help="default: float32 on CPU, auto on GPU")
    parser.add_argument("--speculative", default="ngram", choices=SPEC_ALGORITHMS)
    parser.add_argument("--draft-model", default=str(DEFAULT_DRAFT_MODEL), help="STANDALONE draft model")
    parser.add_argument("--spec-steps", type=int, default=3)
    parser.add_argument("--spec-topk", type=int, default=1)
    parser.add_argument("--spec-draft-tokens", type=int, default=4)
    parser.add_argument("--max-total-tokens", type=int, default=None)
    parser.add_argument("--max-running-requests", type=int, default=None)
    parser.add_argument(
        "--metrics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the engine's /metrics: SGLang's and moe-serve's speculation series (SGLang's --enable-metrics)",
    )
    parser.add_argument(
        "--default-policy",
        default=EngineSettings().default_policy,
        help="speculation policy of requests without moe-serve hints ('sglang': the drafter's full depth)",
    )
    parser.add_argument("--policy-params", default="", help='JSON {"policy": {"param": value}} for the policies')
    parser.add_argument("--budget-mode", default=EngineSettings().budget_mode, choices=BUDGET_MODES)
    parser.add_argument(
        "--verify-layout",
        default=EngineSettings().verify_layout,
        choices=VERIFY_LAYOUTS,
        help="ragged: each request verifies its own K + 1 tokens; rectangular / fixed: for comparisons",
    )
    parser.add_argument(
        "--cpu-attention",
        default=EngineSettings().cpu_attention,
        choices=CPU_ATTENTION,
        help="CPU engine: fused = torch's fused attention kernel per layer; batched / loop = torch ops over the padded "
        "batch / per request (for comparisons)",
    )
    parser.add_argument(
        "--cpu-gemm",
        default=EngineSettings().cpu_gemm,
        choices=CPU_GEMM,
        help="CPU engine's products at a step's few rows: tuned = the fastest form per shape and row count (our stream "
        "kernel included) for the experts, dense layers and lm_head; experts = for the experts only; lockstep = "
        "experts only, the kernel's first walk only; torch = experts only, without the kernel; linear = SGLang's; "
        "unfused = tuned, each MoE layer's experts one by one from Python (all but the first for comparisons)",
    )
    parser.add_argument(
        "--expert-weights",
        default=EngineSettings().expert_weights,
        choices=EXPERT_WEIGHTS,
        help="CPU engine's MoE expert weights: bf16-exact = kept as bfloat16 where every value of a layer's is one (a "
        "bfloat16 checkpoint's), read at half the bytes and multiplied in float32, and so the target's LM head for "
        "decode and verify forwards of <= 16 rows; float32 = SGLang's float32 copies (for comparisons)",
    )
    parser.add_argument(
        "--draft-forward",
        default=EngineSettings().draft_forward,
        choices=DRAFT_FORWARD,
        help="STANDALONE draft model's forwards: direct = its arithmetic over its KV pool (a Llama-shaped float32 "
        "draft on CPU; otherwise SGLang's runner), chain forwards' attention by the C++ op and "
        "bfloat16-exact MLP and LM head weights read as bfloat16; torch-ops = direct in torch ops and float32; "
        "sglang = SGLang's model runner (the last two for comparisons)",
    )
    parser.add_argument(
        "--draft-thread",
        default=EngineSettings().draft_thread,
        choices=DRAFT_THREAD,
        help="STANDALONE draft model's forwards that a step does not wait on (a prompt's catch-up during the "
        "target's prefill, a judgement during the step's target forward): auto = on a thread of their own where the "
        "process may use more CPUs than torch's threads; on / off = always / never on that thread",
    )
    parser.add_argument(
        "--target-forward",
        default=EngineSettings().target_forward,
        choices=TARGET_FORWARD,
        help="CPU engine's target model decode and verify forwards: direct = its arithmetic over its KV pool (a "
        "Mixtral-shaped float32 model; otherwise SGLang's forward), attention and MoE sublayers by C++ ops; torch-ops = "
        "direct with those sublayers as torch ops; modules = direct with the MoE through SGLang's TopK / FusedMoE "
        "modules; sglang = SGLang's model stack (the last three for comparisons)",
    )
    parser.add_argument(
        "--process-start",
        default=EngineSettings().process_start,
        choices=PROCESS_START,
        help="CPU engine's scheduler and detokenizer processes: fork = forked from the launcher (no second import of "
        "SGLang; faster start); spawn = SGLang's own start method (for comparisons; always on GPUs)",
    )
    parser.add_argument(
        "--gemm-plan",
        default=EngineSettings().gemm_plan,
        choices=GEMM_PLAN,
        help="CPU engine's product forms: cached = timed by the first engine on this machine, kept in build/gemm-plans "
        "($MOE_SERVE_PLAN_DIR) and read by later ones; tune = timed at every start",
    )
    parser.add_argument(
        "--arrival-gather-ms",
        type=float,
        default=EngineSettings().arrival_gather_ms,
        help="requests arriving within this many ms of one that reached an idle engine are a burst; after a burst, an "
        "idle engine waits (at most this long) for the next burst to be complete and prefills it together (0 = off: "
        "SGLang prefills what has arrived when it looks)",
    )
    parser.add_argument(
        "--plain-burst",
        type=int,
        default=EngineSettings().plain_burst,
        help="speculative engines: where no request of the batch may draft (K capped at 0 by its hints or resting), "
        "one scheduler step decodes up to this many tokens per request, one plain forward each, ending early when a "
        "request arrives (1 = one token a step, as SGLang decodes)",
    )
    parser.add_argument(
        "--step-log",
        default="",
        metavar="PATH",
        help="speculative engines: append one JSON line per decode step to PATH (timing, K, drafts verified and "
        "accepted, resting; moe_sglang/step_log.py), for finding where a request's time goes; off by default",
    )
    parser.add_argument("sglang_args", nargs=argparse.REMAINDER, help="after --: passed to SGLang unchanged")


def engine_config(args: argparse.Namespace) -> EngineConfig:
    extra = tuple(a for a in args.sglang_args if a != "--")
    if args.metrics and METRICS_FLAG not in extra:
        extra += (METRICS_FLAG,)  # on unless asked off: the dashboards read the engine, SGLang defaults to off
    spec = SpeculationConfig(
        algorithm=args.speculative,
        draft_model_path=args.draft_model if args.speculative == "standalone" else None,
        num_steps=args.spec_steps,
        topk=args.spec_topk,
        num_draft_tokens=args.spec_draft_tokens,
    )
    return EngineConfig(
        model_path=args.model,
        host=args.host,
        port=args.port,
        device=args.device,
        dtype=args.dtype,
        speculation=spec,
        max_total_tokens=args.max_total_tokens,
        max_running_requests=args.max_running_requests,
        settings=EngineSettings(
            default_policy=args.default_policy,
            policy_params_json=args.policy_params,
            budget_mode=args.budget_mode,
            verify_layout=args.verify_layout,
            cpu_attention=args.cpu_attention,
            cpu_gemm=args.cpu_gemm,
            expert_weights=args.expert_weights,
            draft_forward=args.draft_forward,
            draft_thread=args.draft_thread,
            target_forward=args.target_forward,
            process_start=args.process_start,
            gemm_plan=args.gemm_plan,
            arrival_gather_ms=args.arrival_gather_ms,
            plain_burst=args.plain_burst,
            step_log=args.step_log,
        ),
        extra_args=extra,
    )


add_arguments = add_engine_arguments


def run(args: argparse.Namespace) -> int:
    from moe_sglang.launch import server_command

    argv, env = server_command(engine_config(args))
    os.execvpe(argv[0], argv, env)  # the server becomes this process: signals and exit codes pass through
