"""Tenant management behind the admin key: list, create/replace, delete.

Changes apply to this gateway instance's registry; with several replicas, apply them to each (or reload the file).
Plain API keys may be sent (`api_keys`) and are hashed on arrival; only digests are kept or returned.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends

from service.gateway.deps import StateDep, require_admin
from service.gateway.errors import GatewayError
from service.gateway.tenants import hash_key, tenant_from_dict, tenant_to_dict

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)])


@router.get("/tenants")
async def list_tenants(state: StateDep):
    return {"tenants": [tenant_to_dict(t) for t in state.tenants.all()]}


@router.get("/tenants/{name}")
async def get_tenant(name: str, state: StateDep):
    tenant = state.tenants.get(name)
    if tenant is None:
        raise GatewayError(404, f"No tenant named {name!r}.", code="tenant_not_found")
    return tenant_to_dict(tenant)


@router.put("/tenants/{name}")
async def put_tenant(name: str, spec: Annotated[dict[str, Any], Body()], state: StateDep):
    spec = dict(spec)
    plain = spec.pop("api_keys", [])
    if not isinstance(plain, list) or not all(isinstance(k, str) and k for k in plain):
        raise GatewayError(400, "'api_keys' must be a list of non-empty strings.", param="api_keys")
    digests = spec.get("key_sha256", [])
    if isinstance(digests, str):
        digests = [digests]
    if not isinstance(digests, list):
        raise GatewayError(400, "'key_sha256' must be a list of SHA-256 hex digests.", param="key_sha256")
    spec["key_sha256"] = digests + [hash_key(k) for k in plain]
    spec["name"] = name
    try:
        tenant = tenant_from_dict(spec)
        state.tenants.put(tenant)
    except (ValueError, TypeError) as exc:
        raise GatewayError(400, str(exc), code="invalid_tenant") from exc
    return tenant_to_dict(tenant)


@router.delete("/tenants/{name}")
async def delete_tenant(name: str, state: StateDep):
    if not state.tenants.remove(name):
        raise GatewayError(404, f"No tenant named {name!r}.", code="tenant_not_found")
    return {"deleted": name}
