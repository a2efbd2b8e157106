"""Engine replica state and the least-outstanding-requests choice (issue 5, item 3)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Replica:
    url: str  # base URL of one SGLang HTTP server
    outstanding: int = 0  # requests, sent and not yet finished
    outstanding_tokens: int = 0  # tokens (admission estimate) of those
    healthy: bool = True  # last /health probe (or last request) succeeded
    slow_probes: int = 0  # consecutive /health probes that timed out
    served: int = 0  # requests, ever sent here
    failures: int = 0  # requests, ever failed here before their first token
    failing: int = 0  # requests failed here in a row, before their first token (reset by one that got an answer)
    down_until: float = 0.0  # monotonic seconds; after a failed request the replica sits out until then, even if
    # /health says 200 (SGLang's /health does not run a generation unless told to)
    engine_max_running: int | None = None  # requests the engine runs at once (SGLang /server_info), None: unknown
    engine_kv_tokens: int | None = None  # tokens of KV cache the engine holds (max_total_num_tokens), None: unknown


@dataclass(frozen=True)
class ReplicaStats:
    url: str  # base URL
    outstanding: int  # requests in flight
    healthy: bool  # last probe result
    served: int  # requests sent, total
    failures: int  # requests failed before a token, total


def pick_replica(
    replicas: list[Replica], exclude: set[str], has_room: Callable[[Replica], bool], now: float = 0.0
) -> Replica | None:
    """Healthy, not cooling down at `now`, not excluded, with room (overload.has_room), fewest outstanding; ties go
    to the one served least (spreads cold starts).

    Returns None when no replica qualifies (the caller answers 503).
    """
    candidates = [r for r in replicas if r.healthy and r.down_until <= now and r.url not in exclude and has_room(r)]
    if not candidates:
        return None
    return min(candidates, key=lambda r: (r.outstanding, r.served))
