"""The policy line-up and the task × policy × batch-size runs behind bench/policy_sim.py and its test.

TPOT relative to no speculation = mean over seeds of TPOT(policy) / TPOT(plain decode), same requests and seed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from service.policy.base import SpeculationPolicy, make_policy
from service.policy.sim import simulate
from service.policy.sim_config import Hardware, Workload, workloads

NO_SPECULATION = "none"


def lineup(hw: Hardware) -> dict[str, tuple[str, dict[str, object]]]:
    """Report name -> (registry name, parameters). moe-serve is told the model's shape, as the engine would."""
    return {
        NO_SPECULATION: ("static", {"k": 0}),
        "static-1": ("static", {"k": 1}),
        "static-2": ("static", {"k": 2}),
        "static-3": ("static", {"k": 3}),
        "sglang-adaptive": ("sglang-adaptive", {}),
        "cascade": ("cascade", {}),
        "adaspec": ("adaspec", {}),
        "moe-serve": ("moe-serve", {"num_experts": hw.num_experts, "top_k": hw.top_k, "num_layers": hw.num_layers}),
    }


@dataclass(frozen=True)
class MatrixConfig:
    batch_sizes: tuple[int, ...] = (1, 8)  # requests decoded together; 1 is Cascade's single-batch setting
    requests_per_slot: int = 4  # requests admitted per batch slot over a run
    output_tokens: tuple[int, int] = (256, 512)  # inclusive range of output lengths ("hundreds of tokens")
    seeds: tuple[int, ...] = (0, 1)  # one run per seed, averaged
    policies: tuple[str, ...] | None = None  # report names to run (None = the whole line-up)
    tasks: tuple[str, ...] | None = None  # workload names to run (None = all four)


def build(name: str, hw: Hardware) -> SpeculationPolicy:
    registry_name, params = lineup(hw)[name]
    return make_policy(registry_name, **params)


def relative_tpot(config: MatrixConfig, hw: Hardware | None = None) -> dict[int, dict[str, dict[str, float]]]:
    """{batch size: {task: {policy: TPOT / TPOT without speculation}}}."""
    hw = hw or Hardware()
    names = config.policies or tuple(lineup(hw))
    all_tasks = workloads()
    tasks = config.tasks or tuple(all_tasks)
    out: dict[int, dict[str, dict[str, float]]] = {}
    for batch in config.batch_sizes:
        out[batch] = {}
        for task in tasks:
            work: Workload = dataclasses.replace(all_tasks[task], output_tokens=config.output_tokens)
            n = batch * config.requests_per_slot
            base = {s: simulate(build(NO_SPECULATION, hw), work, hw, batch, n, seed=s).tpot_s for s in config.seeds}
            row = {}
            for name in names:
                if name == NO_SPECULATION:
                    row[name] = 1.0
                    continue
                ratios = [simulate(build(name, hw), work, hw, batch, n, seed=s).tpot_s / base[s] for s in config.seeds]
                row[name] = sum(ratios) / len(ratios)
            out[batch][task] = row
    return out
