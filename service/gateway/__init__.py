"""OpenAI-compatible multi-tenant gateway in front of SGLang engines (issue 5).

Request path: routes/ (one router per resource) -> deps (API key -> tenant) -> admission (model 404, prompt 413,
limits 429 via limits / limits_redis) -> relay (hints -> engine_client -> JSON or SSE back) -> metrics.
Entry point: `app.create_app(config)`; config in `config` + `tenants`; CLI in `cli` (`moe-serve gateway`).
"""
