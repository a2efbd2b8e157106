"""Tenants: who may call the gateway, at what rate, and which speculation settings travel with their requests.

API keys are never stored: a tenant carries the SHA-256 hex digests of its keys (issue 5, item 2), so a leaked config
file or admin listing reveals no usable credential. The registry is per app instance; the admin router mutates it.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from service.gateway.speculation import ANY_POLICY, known_policies, policy_name


def hash_key(api_key: str) -> str:
    """The stored form of an API key: SHA-256 hex digest of its UTF-8 bytes."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class SloClass:
    """A latency target a tenant buys; passed to the engine so the speculation policy can aim at it."""

    name: str  # label, e.g. "interactive" or "batch"
    ttft_ms: float  # milliseconds, time-to-first-token target
    tpot_ms: float  # milliseconds, time-per-output-token target


@dataclass(frozen=True)
class Tenant:
    name: str  # unique tenant id; a Prometheus label value
    key_hashes: tuple[str, ...]  # SHA-256 hex digests of the tenant's API keys
    rpm: int  # requests per minute admitted
    tpm: int  # tokens (prompt estimate + max_tokens) per minute admitted
    priority: int = 0  # engine scheduling priority; larger runs first (SGLang default order)
    slo: SloClass = field(default_factory=lambda: SloClass("standard", 1000.0, 100.0))
    policy: str = "auto"  # speculation policy name the engine plugin applies ("auto" = engine's choice)
    allow_lossy_budget: bool = False  # whether the engine may cap experts per verify step (lossy MoE-Spec budget)
    # What a request may ask for in its `speculation` field (speculation.py):
    allowed_policies: tuple[str, ...] = ()  # policy names a request may pick ("*": any); () = only `policy`
    max_k: int | None = None  # draft tokens, ceiling on K for every request of the tenant; None = the engine's
    min_expert_budget: int | None = None  # experts per MoE layer, the lowest budget a request may ask; None = any
    max_in_flight: int | None = None  # requests outstanding at once; None: the gateway's default (overload.py)
    max_in_flight_tokens: int | None = None  # tokens (admission estimate) outstanding at once; None: the default


_SLO_FIELDS = {"name", "ttft_ms", "tpot_ms"}
_SPECULATION_FIELDS = {"allowed_policies", "max_k", "min_expert_budget"}
_TENANT_FIELDS = {"name", "key_sha256", "rpm", "tpm", "priority", "slo", "policy", "allow_lossy_budget"}
_TENANT_FIELDS |= _SPECULATION_FIELDS | {"max_in_flight", "max_in_flight_tokens"}


def tenant_from_dict(raw: Any) -> Tenant:
    """Build a Tenant from its YAML/JSON form; a bad field raises ValueError naming it."""
    if not isinstance(raw, dict):
        raise ValueError(f"tenant entry must be a mapping, got {type(raw).__name__}")
    unknown = set(raw) - _TENANT_FIELDS
    if unknown:
        raise ValueError(f"tenant {raw.get('name')!r}: unknown fields {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("tenant: 'name' must be a non-empty string")
    hashes = raw.get("key_sha256", [])
    if isinstance(hashes, str):
        hashes = [hashes]
    for digest in hashes:
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise ValueError(f"tenant {name!r}: key_sha256 entries must be 64 lowercase hex chars")
    for limit in ("rpm", "tpm"):
        value = raw.get(limit)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"tenant {name!r}: {limit!r} must be a positive integer")
    slo_raw = raw.get("slo", {"name": "standard", "ttft_ms": 1000.0, "tpot_ms": 100.0})
    if not isinstance(slo_raw, dict) or set(slo_raw) != _SLO_FIELDS:
        raise ValueError(f"tenant {name!r}: 'slo' needs exactly {sorted(_SLO_FIELDS)}")
    slo = SloClass(str(slo_raw["name"]), float(slo_raw["ttft_ms"]), float(slo_raw["tpot_ms"]))
    if slo.ttft_ms <= 0 or slo.tpot_ms <= 0:
        raise ValueError(f"tenant {name!r}: slo targets must be positive")
    priority = raw.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ValueError(f"tenant {name!r}: 'priority' must be an integer")
    policy = raw.get("policy", "auto")
    if not isinstance(policy, str) or not policy:
        raise ValueError(f"tenant {name!r}: 'policy' must be a non-empty string")
    lossy = raw.get("allow_lossy_budget", False)
    if not isinstance(lossy, bool):
        raise ValueError(f"tenant {name!r}: 'allow_lossy_budget' must be true or false")
    return Tenant(
        name,
        tuple(hashes),
        raw["rpm"],
        raw["tpm"],
        priority,
        slo,
        policy,
        lossy,
        **_speculation(name, raw),
        **_in_flight_bounds(name, raw),
    )


def _speculation(name: str, raw: dict) -> dict[str, Any]:
    allowed = raw.get("allowed_policies", [])
    if not isinstance(allowed, list) or not all(isinstance(p, str) and p for p in allowed):
        raise ValueError(f"tenant {name!r}: 'allowed_policies' must be a list of policy names")
    unknown = [p for p in allowed if p != ANY_POLICY and policy_name(p) not in known_policies()]
    if unknown:
        raise ValueError(f"tenant {name!r}: unknown policies {unknown} in 'allowed_policies'")
    bounds = {"max_k": 0, "min_expert_budget": 1}
    for field_name, least in bounds.items():
        value = raw.get(field_name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least):
            raise ValueError(f"tenant {name!r}: {field_name!r} must be an integer >= {least}")
    return {"allowed_policies": tuple(allowed), **{k: raw.get(k) for k in bounds}}


def _in_flight_bounds(name: str, raw: dict) -> dict[str, int | None]:
    bounds = {}
    for bound in ("max_in_flight", "max_in_flight_tokens"):
        value = raw.get(bound)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise ValueError(f"tenant {name!r}: {bound!r} must be a positive integer or absent")
        bounds[bound] = value
    return bounds


def tenant_to_dict(tenant: Tenant) -> dict[str, Any]:
    """The YAML/JSON form of a tenant (key digests included, never keys)."""
    return {
        "name": tenant.name,
        "key_sha256": list(tenant.key_hashes),
        "rpm": tenant.rpm,
        "tpm": tenant.tpm,
        "priority": tenant.priority,
        "slo": {"name": tenant.slo.name, "ttft_ms": tenant.slo.ttft_ms, "tpot_ms": tenant.slo.tpot_ms},
        "policy": tenant.policy,
        "allow_lossy_budget": tenant.allow_lossy_budget,
        "allowed_policies": list(tenant.allowed_policies),
        "max_k": tenant.max_k,
        "min_expert_budget": tenant.min_expert_budget,
        "max_in_flight": tenant.max_in_flight,
        "max_in_flight_tokens": tenant.max_in_flight_tokens,
    }


def load_tenants_file(path: str | Path) -> tuple[Tenant, ...]:
    """Tenants from a YAML file shaped like deploy/tenants.example.yaml (`tenants: [...]`)."""
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("tenants"), list):
        raise ValueError(f"{path}: expected a mapping with a 'tenants' list")
    tenants = tuple(tenant_from_dict(entry) for entry in data["tenants"])
    TenantRegistry(tenants)  # duplicate names or keys fail here, at load time
    return tenants


class TenantRegistry:
    """Key digest -> tenant lookup, mutable through the admin router. One per app, never global."""

    def __init__(self, tenants: tuple[Tenant, ...] = ()) -> None:
        self._by_name: dict[str, Tenant] = {}
        self._by_hash: dict[str, str] = {}
        self.priorities: tuple[int, ...] = ()  # distinct tenant priorities, highest first (overload.py's classes)
        for tenant in tenants:
            self.put(tenant, replace=False)

    def put(self, tenant: Tenant, *, replace: bool = True) -> None:
        """Add a tenant, or replace the one with its name; a key digest owned by another tenant raises ValueError."""
        if tenant.name in self._by_name and not replace:
            raise ValueError(f"duplicate tenant name {tenant.name!r}")
        for digest in tenant.key_hashes:
            owner = self._by_hash.get(digest)
            if owner is not None and owner != tenant.name:
                raise ValueError(f"tenant {tenant.name!r}: a key is already used by tenant {owner!r}")
        self.remove(tenant.name)
        self._by_name[tenant.name] = tenant
        for digest in tenant.key_hashes:
            self._by_hash[digest] = tenant.name
        self._rank()

    def remove(self, name: str) -> bool:
        tenant = self._by_name.pop(name, None)
        if tenant is None:
            return False
        for digest in tenant.key_hashes:
            self._by_hash.pop(digest, None)
        self._rank()
        return True

    def _rank(self) -> None:
        self.priorities = tuple(sorted({t.priority for t in self._by_name.values()}, reverse=True))

    def get(self, name: str) -> Tenant | None:
        return self._by_name.get(name)

    def all(self) -> list[Tenant]:
        return sorted(self._by_name.values(), key=lambda t: t.name)

    def authenticate(self, api_key: str) -> Tenant | None:
        """The tenant owning this key, or None. Lookup is by digest, so its time does not depend on key prefixes."""
        name = self._by_hash.get(hash_key(api_key))
        return None if name is None else self._by_name.get(name)


def admin_key_matches(api_key: str, admin_key_hash: str) -> bool:
    return hmac.compare_digest(hash_key(api_key), admin_key_hash)
