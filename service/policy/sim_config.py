"""What the simulator simulates: task classes (how well drafts are accepted, how tokens route) and the hardware.

Acceptance of a request drifts: its tokens alternate between a good and a bad phase whose boundaries are drawn per
request in token positions (so every policy sees the same drift for the same request and seed).
"""

from __future__ import annotations

from dataclasses import dataclass

from service.policy.types import SloClass


@dataclass(frozen=True)
class TaskClass:
    name: str  # label used in reports
    accept_good: float  # P(accept draft position 1) in the good phase
    accept_bad: float  # P(accept draft position 1) in the bad phase
    decay: float  # factor on the acceptance probability per later draft position
    phase_len: float  # tokens, mean length of a phase before acceptance switches
    affinity: float  # P(a token reuses the previous token's experts), per layer
    confidence_noise: float = 0.1  # std of the drafter's confidence around the true acceptance probability


@dataclass(frozen=True)
class Hardware:
    """A memory-bound sparse MoE at small batch (OLMoE-like shape by default); time per simulated layer."""

    num_experts: int = 64  # routed experts per layer (E)
    top_k: int = 8  # experts per token (k)
    num_layers: int = 4  # simulated MoE layers (each stands for several real ones)
    expert_load_s: float = 4.6e-5  # seconds to stream one expert's weights in one layer
    expert_compute_s: float = 2e-6  # seconds of expert compute per token-expert pair
    dense_fixed_s: float = 1.5e-3  # seconds per target forward outside the experts
    dense_token_s: float = 2e-5  # seconds per verified token outside the experts
    attention_ctx_s: float = 1e-8  # seconds per KV token read per step
    draft_step_s: float = 4e-4  # seconds per sequential draft forward
    draft_token_s: float = 1e-5  # seconds per drafted token
    other_s: float = 5e-4  # seconds per step of sampling and scheduling
    noise: float = 0.03  # relative std of each step's time


@dataclass(frozen=True)
class Workload:
    name: str  # label used in reports
    classes: tuple[TaskClass, ...]  # each new request draws one uniformly
    prompt_tokens: tuple[int, int] = (200, 1000)  # inclusive range of prompt lengths
    output_tokens: tuple[int, int] = (96, 192)  # inclusive range of output lengths
    slo: SloClass | None = None  # latency class of every request


CODE = TaskClass("code", accept_good=0.92, accept_bad=0.6, decay=0.97, phase_len=60, affinity=0.5)
MATH = TaskClass("math", accept_good=0.25, accept_bad=0.05, decay=0.9, phase_len=60, affinity=0.3)
PROSE = TaskClass("prose", accept_good=0.7, accept_bad=0.35, decay=0.95, phase_len=60, affinity=0.4)


def workloads() -> dict[str, Workload]:
    """The four tasks of bench/policy_sim.py: three single-class ones and their even mix."""
    return {
        "code-like": Workload("code-like", (CODE,)),
        "math-like": Workload("math-like", (MATH,)),
        "prose-like": Workload("prose-like", (PROSE,)),
        "mixed": Workload("mixed", (CODE, MATH, PROSE)),
    }
