"""FastAPI dependencies: the gateway state, the calling tenant (API key), the admin key."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.gateway.errors import GatewayError
from service.gateway.state import GatewayState
from service.gateway.tenants import Tenant, admin_key_matches

bearer = HTTPBearer(auto_error=False, description="Tenant API key (admin key for /admin)")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


async def get_state(request: Request) -> GatewayState:
    return request.app.state.gateway


StateDep = Annotated[GatewayState, Depends(get_state)]


async def require_tenant(request: Request, credentials: Credentials, state: StateDep) -> Tenant:
    """The tenant owning the bearer key; 401 otherwise, before anything reaches the engine."""
    if credentials is None or not credentials.credentials:
        state.metrics.requests.labels("", request.url.path, "401").inc()
        raise GatewayError(401, "Missing API key: send 'Authorization: Bearer <key>'.", code="missing_api_key")
    tenant = state.tenants.authenticate(credentials.credentials)
    if tenant is None:
        state.metrics.requests.labels("", request.url.path, "401").inc()
        raise GatewayError(401, "Incorrect API key provided.", code="invalid_api_key")
    return tenant


async def require_admin(credentials: Credentials, state: StateDep) -> None:
    if state.config.admin_key_hash is None:
        raise GatewayError(404, "The admin API is disabled (no admin key configured).", code="not_found")
    if credentials is None or not admin_key_matches(credentials.credentials, state.config.admin_key_hash):
        raise GatewayError(401, "Missing or incorrect admin key.", code="invalid_api_key")


TenantDep = Annotated[Tenant, Depends(require_tenant)]


async def require_any_key(credentials: Credentials, state: StateDep) -> None:
    """A tenant's key or the admin key (the API description is not public: it lists the admin API)."""
    key = credentials.credentials if credentials is not None else ""
    admin = state.config.admin_key_hash
    if not key or (state.tenants.authenticate(key) is None and not (admin and admin_key_matches(key, admin))):
        raise GatewayError(401, "Missing or incorrect API key.", code="invalid_api_key")
