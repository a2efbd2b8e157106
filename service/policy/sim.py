"""A step-level simulator of a MoE decode batch, for testing and benchmarking policies without an engine.

Each step: the policy decides K per request → the simulated drafter produces K confidences per request → the policy
trims → verification accepts a prefix (token i accepted with probability = its confidence, so confidences are
calibrated) → tokens route top-k per layer (a token reuses its predecessor's experts with the task's affinity) →
step time = draft + roofline verify (Σ_layers max(unique experts · load, tokens · k · compute) + dense part) + other.
Closed loop: a finished request is replaced until `num_requests` have been admitted. All randomness comes from
seeded `random.Random` streams, so a run is a pure function of (policy, workload, hardware, sizes, seed).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from service.policy.base import SpeculationPolicy
from service.policy.sim_config import Hardware, TaskClass, Workload
from service.policy.types import BatchView, Decision, RequestStepStats, RequestView, StepStats


@dataclass
class _Request:
    index: int  # admission order
    task: TaskClass
    prompt: int  # tokens
    target: int  # tokens to generate
    switches: list[int]  # token positions where the acceptance phase flips
    rng: random.Random  # this request's acceptance randomness
    generated: int = 0  # tokens so far
    decode_s: float = 0.0  # seconds spent in decode steps so far
    recent: tuple[int, ...] = ()  # accepted drafts of the last steps

    def accept_prob(self, position: int) -> float:
        """P(accept the draft at 1-based `position` of this step), from the phase at the current token."""
        flips = sum(1 for s in self.switches if s <= self.generated)
        base = self.task.accept_good if flips % 2 == 0 else self.task.accept_bad
        return base * self.task.decay ** (position - 1)


@dataclass(frozen=True)
class SimResult:
    tpot_s: float  # mean over finished requests of decode seconds / generated tokens
    tpot_by_class: dict[str, float]  # the same, per task class
    steps: int  # decode steps run
    mean_k: float  # mean verified drafts per request per step
    max_step_over_cap: float  # seconds, largest step time beyond the SLO cap (0 = never exceeded)


def _new_request(index: int, workload: Workload, seed: int) -> _Request:
    rng = random.Random(seed * 1_000_003 + index)
    task = workload.classes[rng.randrange(len(workload.classes))]
    prompt = rng.randint(*workload.prompt_tokens)
    target = rng.randint(*workload.output_tokens)
    switches, pos = [], 0.0
    while pos < target:
        pos += rng.expovariate(1.0 / task.phase_len)
        switches.append(int(pos))
    return _Request(index, task, prompt, target, switches, random.Random(rng.random()))


def _unique_experts(tokens_per_request: list[tuple[int, float]], hw: Hardware, rng: random.Random) -> int:
    """Distinct experts in one layer: each fresh routing picks k distinct experts uniformly (hypergeometric fill)."""
    used = 0
    e, k = hw.num_experts, hw.top_k
    for tokens, affinity in tokens_per_request:
        fresh = 1 + sum(1 for _ in range(tokens - 1) if rng.random() >= affinity)
        for _ in range(fresh):
            new = 0
            for picked in range(k):
                if rng.random() * (e - picked) < e - used - new:
                    new += 1
            used += new
    return used


def _check(decision: Decision, batch: BatchView) -> None:
    if len(decision.requests) != len(batch.requests):
        raise ValueError(f"policy decided for {len(decision.requests)} requests, batch has {len(batch.requests)}")
    for d, r in zip(decision.requests, batch.requests, strict=True):
        if d.request_id != r.request_id or d.k > batch.max_k:
            raise ValueError(f"bad decision {d} for request {r.request_id!r} (max_k={batch.max_k})")


def simulate(
    policy: SpeculationPolicy,
    workload: Workload,
    hardware: Hardware | None = None,
    batch_size: int = 8,
    num_requests: int = 48,
    max_k: int = 7,
    seed: int = 0,
) -> SimResult:
    hw = hardware or Hardware()
    if batch_size < 1 or num_requests < 1:
        raise ValueError("need batch_size >= 1 and num_requests >= 1")
    route_rng = random.Random(seed * 7919 + 1)
    noise_rng = random.Random(seed * 7919 + 2)
    admitted = min(batch_size, num_requests)
    running = [_new_request(i, workload, seed) for i in range(admitted)]
    done: list[_Request] = []
    now, steps, verified, slots, over = 0.0, 0, 0, 0, 0.0
    while running:
        views = tuple(
            RequestView(
                f"r{q.index}",
                slo=workload.slo,
                tokens_so_far=q.generated,
                context_len=q.prompt + q.generated,
                recent_accepts=q.recent,
            )
            for q in running
        )
        batch = BatchView(now=now, requests=views, max_k=max_k)
        decision = policy.decide(batch)
        _check(decision, batch)
        probs = [[q.accept_prob(i + 1) for i in range(d.k)] for q, d in zip(running, decision.requests, strict=True)]
        confs = [
            tuple(min(0.99, max(0.01, p + q.rng.gauss(0.0, q.task.confidence_noise))) for p in ps)
            for q, ps in zip(running, probs, strict=True)
        ]
        drafted = BatchView(
            now=now,
            requests=tuple(
                RequestView(
                    v.request_id,
                    slo=v.slo,
                    tokens_so_far=v.tokens_so_far,
                    context_len=v.context_len,
                    recent_accepts=v.recent_accepts,
                    draft_confidences=c,
                )
                for v, c in zip(views, confs, strict=True)
            ),
            max_k=max_k,
        )
        decision = policy.trim(drafted, decision)
        _check(decision, batch)
        per_request, tokens = [], []
        for q, d, c in zip(running, decision.requests, confs, strict=True):
            accepted = 0
            while accepted < d.verify_len and q.rng.random() < c[accepted]:
                accepted += 1
            per_request.append(RequestStepStats(d.request_id, d.verify_len, accepted))
            tokens.append((d.verify_len + 1, q.task.affinity))
        n = sum(t for t, _ in tokens)
        unique = tuple(_unique_experts(tokens, hw, route_rng) for _ in range(hw.num_layers))
        ctx = sum(q.prompt + q.generated for q in running)
        ks = [d.k for d in decision.requests]
        draft_steps = max(ks, default=0)
        draft_s = sum(hw.draft_step_s + hw.draft_token_s * sum(1 for k in ks if k > s) for s in range(draft_steps))
        verify_s = (
            hw.dense_fixed_s
            + hw.dense_token_s * n
            + hw.attention_ctx_s * ctx
            + sum(max(u * hw.expert_load_s, n * hw.top_k * hw.expert_compute_s) for u in unique)
        )
        jitter = max(0.5, 1.0 + noise_rng.gauss(0.0, hw.noise))
        draft_s, verify_s, other_s = draft_s * jitter, verify_s * jitter, hw.other_s * jitter
        step_s = draft_s + verify_s + other_s
        now += step_s
        steps += 1
        if workload.slo is not None and workload.slo.tpot_s is not None:
            over = max(over, step_s - workload.slo.tpot_s)
        policy.observe(
            StepStats(
                now=now,
                batch_size=len(running),
                requests=tuple(per_request),
                draft_s=draft_s,
                verify_s=verify_s,
                other_s=other_s,
                unique_experts=unique,
                context_tokens=ctx,
                draft_steps=draft_steps,
            )
        )
        still = []
        for q, st in zip(running, per_request, strict=True):
            q.generated += st.accepted + 1
            q.decode_s += step_s
            q.recent = (q.recent + (st.accepted,))[-8:]
            verified += st.k
            slots += 1
            if q.generated >= q.target:
                done.append(q)
            else:
                still.append(q)
        while len(still) < batch_size and admitted < num_requests:
            still.append(_new_request(admitted, workload, seed))
            admitted += 1
        running = still
    by_class: dict[str, list[float]] = {}
    for q in done:
        by_class.setdefault(q.task.name, []).append(q.decode_s / q.generated)
    all_tpot = [t for ts in by_class.values() for t in ts]
    return SimResult(
        tpot_s=sum(all_tpot) / len(all_tpot),
        tpot_by_class={name: sum(ts) / len(ts) for name, ts in sorted(by_class.items())},
        steps=steps,
        mean_k=verified / slots,
        max_step_over_cap=max(over, 0.0),
    )
