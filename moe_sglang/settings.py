"""moe-serve's engine-side settings: one frozen object, read once from the environment of SGLang's processes.

Environment variables are only the channel into SGLang's scheduler process (a process SGLang starts, so no Python
object can be handed over): `EngineConfig.settings` (launch.py) and `moe-serve engine` flags write them with
`to_env()`; the speculative worker reads them once with `from_env()` when it is built. Nothing else reads these
variables.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from moe_sglang.hints import NO_POLICY

# MoE-Spec's two ways of keeping a verify forward inside an expert budget (expert_budget.py)
BUDGET_MODES = ("truncation", "substitution")

# How the verify forward is laid out (the policies price K with the same names, service/policy/types.py):
# ragged: request i verifies min(K_i, D_i) + 1 tokens; rectangular: every request verifies the batch's largest
# min(K_i, D_i) + 1 (what a fixed-width verify kernel can do); fixed: every request verifies the drafter's full width
# (SGLang's own layout). Acceptance is capped at K_i in all three, so output is identical; only the work differs.
VERIFY_LAYOUTS = ("ragged", "rectangular", "fixed")

# How the CPU engine's attention ops attend: fused = torch's fused attention kernel, one call per layer over the step's
# requests padded together (service/kernels/attention_fused.py); batched = the same padding in plain torch ops;
# loop = request by request (the reference; service/kernels/attention_cpu.py). The last two are kept for comparisons.
CPU_ATTENTION = ("fused", "batched", "loop")

# How the CPU engine multiplies a step's few rows: tuned = per shape and row count the fastest form of the product
# (torch's two, our stream kernel's walks and, for bfloat16 expert weights on a CPU with AMX, its AMX tile forms:
# service/kernels/small_gemm.py), timed on the weights at their first product, for the experts
# (moe_sglang/cpu_moe.py) and the dense layers and lm_head (moe_sglang/cpu_dense.py); walks = tuned without the AMX
# forms; experts = the experts only, the dense products SGLang's; lockstep = the experts only, with the stream kernel's
# first walk only (as before its walks were tuned, stream_gemm.KINDS); torch = the experts only, without the stream
# kernel; linear = SGLang's own F.linear everywhere; unfused = tuned, but each MoE layer's experts one by one from
# Python (small_gemm.moe_experts_python) instead of in one call of the kernel's library (stream_gemm.stream_moe).
# All but the first are kept for comparisons.
CPU_GEMM = ("tuned", "walks", "experts", "lockstep", "torch", "linear", "unfused")
PLANNED_DENSE = ("tuned", "walks", "unfused")  # the settings whose dense products are planned too (cpu_dense.py)

# How the CPU engine keeps a MoE layer's expert weights (moe_sglang/cpu_moe.py): bf16-exact = as bfloat16 where every
# value of the layer's w13 and w2 is one (a bfloat16 checkpoint's, which SGLang widens to the engine's float32), read
# by the stream kernel at half the bytes and multiplied in float32 (with cpu_gemm tuned, experts or lockstep); float32
# = SGLang's float32 copy (for comparisons).
EXPERT_WEIGHTS = ("bf16-exact", "float32")

# How the STANDALONE draft model runs its forwards (moe_sglang/draft_forward.py): direct = its arithmetic over the
# draft's KV pool, without SGLang's model runner, where that reproduces the model (a Llama-shaped float32 draft on
# CPU; otherwise the runner), its chain forwards' attention sublayers by the C++ op and bfloat16-exact MLP and LM
# head weights read as bfloat16 where they apply; torch-ops = direct in torch ops and float32 weights only;
# sglang = always SGLang's runner. The last two are kept for comparisons.
DRAFT_FORWARD = ("direct", "torch-ops", "sglang")

# Where the STANDALONE draft model's forwards that a step does not wait on run (a prompt's catch-up during the
# target's prefill, a judgement during the step's target forward; moe_sglang/draft_thread.py): auto = on a thread of
# their own where the process may use more CPUs than torch's threads, else on the scheduler's thread; on / off =
# always the one or the other (off: as before, for comparisons). Only the direct draft forward runs on the thread.
DRAFT_THREAD = ("auto", "on", "off")

# How the CPU engine's target model runs its decode and verify forwards (moe_sglang/target_forward.py): direct = its
# arithmetic over the KV pool, without SGLang's model stack, where that reproduces the model (a Mixtral-shaped float32
# model on CPU; otherwise SGLang's forward), its MoE sublayers without the TopK / FusedMoE modules' dispatch where
# that is a no-op (moe_sglang/inline_moe.py), a decode's attention sublayers and the MoE sublayers of decodes and
# verifies each one call of a C++ op (service/kernels/decode_attention.py, decode_moe.py) where it is built; torch-ops
# = direct, those sublayers as torch ops; modules =
# direct, the MoE through those modules; sglang = always SGLang's forward. The last three are kept for comparisons.
TARGET_FORWARD = ("direct", "torch-ops", "modules", "sglang")

# How SGLang starts its scheduler and detokenizer processes on the CPU engine (moe_sglang/process_start.py): fork =
# forked from the launcher, which has imported SGLang and loaded this plugin already, so they start without importing
# both again; spawn = SGLang's own start method, a fresh interpreter each (always on GPUs: a CUDA context must not be
# forked). The second is kept for comparisons.
PROCESS_START = ("fork", "spawn")

# Where the CPU engine's product forms come from (service/kernels/plan_cache.py): cached = timed by the first engine on
# this machine and kept on disk, read by every later one (engines compared on one machine multiply alike); tune =
# timed at every start.
GEMM_PLAN = ("cached", "tune")

# The window of moe_sglang/arrival_gather.py (milliseconds): requests arriving within it after one that reached an idle
# engine count as one burst, and an idle engine whose last arrival was a burst waits at most this long for the next
# burst to be complete; 0 = never wait, SGLang's own receiving (kept for comparisons). 250: a burst of 8 was seen to
# take up to 156 ms to arrive (100 ms split waves: arrival_gather.py).
ARRIVAL_GATHER_MS = 250.0

# The most plain decode forwards one scheduler step of a speculative engine runs for a batch in which no request may
# draft (plain_burst.py); 1 = one token per step, as SGLang's engines decode.
PLAIN_BURST = 4

ENV = {
    "default_policy": "MOE_SERVE_DEFAULT_POLICY",
    "policy_params": "MOE_SERVE_POLICY_PARAMS",
    "budget_mode": "MOE_SERVE_BUDGET_MODE",
    "verify_layout": "MOE_SERVE_VERIFY_LAYOUT",
    "cpu_attention": "MOE_SERVE_CPU_ATTENTION",
    "cpu_gemm": "MOE_SERVE_CPU_GEMM",
    "expert_weights": "MOE_SERVE_EXPERT_WEIGHTS",
    "draft_forward": "MOE_SERVE_DRAFT_FORWARD",
    "draft_thread": "MOE_SERVE_DRAFT_THREAD",
    "target_forward": "MOE_SERVE_TARGET_FORWARD",
    "process_start": "MOE_SERVE_PROCESS_START",
    "gemm_plan": "MOE_SERVE_GEMM_PLAN",
    "arrival_gather_ms": "MOE_SERVE_ARRIVAL_GATHER_MS",
    "plain_burst": "MOE_SERVE_PLAIN_BURST",
    "step_log": "MOE_SERVE_STEP_LOG",
}


@dataclass(frozen=True)
class EngineSettings:
    default_policy: str = NO_POLICY  # policy of requests without moe_serve hints; "sglang" = SGLang's own K
    policy_params_json: str = ""  # JSON {policy: {param: value}}, constructor arguments per policy ("" = none)
    budget_mode: str = "truncation"  # how the verify expert budget drops experts (expert_budget.BUDGET_MODES)
    verify_layout: str = "ragged"  # VERIFY_LAYOUTS
    cpu_attention: str = "fused"  # CPU_ATTENTION
    cpu_gemm: str = "tuned"  # CPU_GEMM
    expert_weights: str = "bf16-exact"  # EXPERT_WEIGHTS (bf16-exact: the target's LM head too, target_forward.py)
    draft_forward: str = "direct"  # DRAFT_FORWARD
    draft_thread: str = "auto"  # DRAFT_THREAD
    target_forward: str = "direct"  # TARGET_FORWARD
    process_start: str = "fork"  # PROCESS_START
    gemm_plan: str = "cached"  # GEMM_PLAN
    arrival_gather_ms: float = ARRIVAL_GATHER_MS  # window of a burst of arrivals at an idle engine; 0 = off
    plain_burst: int = PLAIN_BURST  # plain decode forwards per step where nobody may draft; 1 = off
    step_log: str = ""  # JSON-lines file the scheduler appends every decode step to (step_log.py); "" = none

    def __post_init__(self) -> None:
        if self.budget_mode not in BUDGET_MODES:
            raise ValueError(f"budget mode {self.budget_mode!r}: expected one of {BUDGET_MODES}")
        if self.verify_layout not in VERIFY_LAYOUTS:
            raise ValueError(f"verify layout {self.verify_layout!r}: expected one of {VERIFY_LAYOUTS}")
        if self.cpu_attention not in CPU_ATTENTION:
            raise ValueError(f"CPU attention {self.cpu_attention!r}: expected one of {CPU_ATTENTION}")
        if self.cpu_gemm not in CPU_GEMM:
            raise ValueError(f"CPU expert products {self.cpu_gemm!r}: expected one of {CPU_GEMM}")
        if self.expert_weights not in EXPERT_WEIGHTS:
            raise ValueError(f"expert weights {self.expert_weights!r}: expected one of {EXPERT_WEIGHTS}")
        if self.draft_forward not in DRAFT_FORWARD:
            raise ValueError(f"draft forward {self.draft_forward!r}: expected one of {DRAFT_FORWARD}")
        if self.draft_thread not in DRAFT_THREAD:
            raise ValueError(f"draft thread {self.draft_thread!r}: expected one of {DRAFT_THREAD}")
        if self.target_forward not in TARGET_FORWARD:
            raise ValueError(f"target forward {self.target_forward!r}: expected one of {TARGET_FORWARD}")
        if self.process_start not in PROCESS_START:
            raise ValueError(f"process start {self.process_start!r}: expected one of {PROCESS_START}")
        if self.gemm_plan not in GEMM_PLAN:
            raise ValueError(f"GEMM plan {self.gemm_plan!r}: expected one of {GEMM_PLAN}")
        if not 0 <= self.arrival_gather_ms <= 1000:
            raise ValueError(f"arrival gather {self.arrival_gather_ms!r} ms: expected 0 (off) to 1000")
        if not 1 <= self.plain_burst <= 16:
            raise ValueError(f"plain burst {self.plain_burst!r}: expected 1 (off) to 16 forwards a step")
        if not self.default_policy.strip():
            raise ValueError("the default policy must be a policy name")
        self.policy_params  # noqa: B018 - parse now: a bad JSON fails at launch, not in the scheduler

    @property
    def policy_params(self) -> dict[str, dict[str, object]]:
        if not self.policy_params_json:
            return {}
        params = json.loads(self.policy_params_json)
        if not isinstance(params, dict) or not all(isinstance(v, dict) for v in params.values()):
            raise ValueError(f"policy params must be a JSON object of objects, got {self.policy_params_json!r}")
        return params

    def to_env(self) -> dict[str, str]:
        return {
            ENV["default_policy"]: self.default_policy,
            ENV["policy_params"]: self.policy_params_json,
            ENV["budget_mode"]: self.budget_mode,
            ENV["verify_layout"]: self.verify_layout,
            ENV["cpu_attention"]: self.cpu_attention,
            ENV["cpu_gemm"]: self.cpu_gemm,
            ENV["expert_weights"]: self.expert_weights,
            ENV["draft_forward"]: self.draft_forward,
            ENV["draft_thread"]: self.draft_thread,
            ENV["target_forward"]: self.target_forward,
            ENV["process_start"]: self.process_start,
            ENV["gemm_plan"]: self.gemm_plan,
            ENV["arrival_gather_ms"]: repr(float(self.arrival_gather_ms)),
            ENV["plain_burst"]: str(int(self.plain_burst)),
            ENV["step_log"]: self.step_log,
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EngineSettings:
        env = os.environ if environ is None else environ
        defaults = cls()
        return cls(
            default_policy=env.get(ENV["default_policy"]) or defaults.default_policy,
            policy_params_json=env.get(ENV["policy_params"], ""),
            budget_mode=env.get(ENV["budget_mode"]) or defaults.budget_mode,
            verify_layout=env.get(ENV["verify_layout"]) or defaults.verify_layout,
            cpu_attention=env.get(ENV["cpu_attention"]) or defaults.cpu_attention,
            cpu_gemm=env.get(ENV["cpu_gemm"]) or defaults.cpu_gemm,
            expert_weights=env.get(ENV["expert_weights"]) or defaults.expert_weights,
            draft_forward=env.get(ENV["draft_forward"]) or defaults.draft_forward,
            draft_thread=env.get(ENV["draft_thread"]) or defaults.draft_thread,
            target_forward=env.get(ENV["target_forward"]) or defaults.target_forward,
            process_start=env.get(ENV["process_start"]) or defaults.process_start,
            gemm_plan=env.get(ENV["gemm_plan"]) or defaults.gemm_plan,
            arrival_gather_ms=float(env.get(ENV["arrival_gather_ms"]) or defaults.arrival_gather_ms),
            plain_burst=int(env.get(ENV["plain_burst"]) or defaults.plain_burst),
            step_log=env.get(ENV["step_log"], ""),
        )
