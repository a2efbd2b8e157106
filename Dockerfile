# syntax=docker/dockerfile:1
# moe-serve images (issue 7), two targets from one file:
#   docker build --target gpu -t moe-serve:0.1.0-gpu .   official SGLang image (CUDA 13) with moe-serve installed on top
#   docker build --target cpu -t moe-serve:0.1.0-cpu .   python:3.11-slim + scripts/setup.sh: the embedded CPU default
# (a plain `docker build .` builds the last target, cpu). Both run `moe-serve` as a non-root user; the command picks
# the component:
#   docker run IMAGE engine --host 0.0.0.0 -- --enable-metrics
#   docker run -e MOE_SERVE_HEALTH_URL=http://127.0.0.1:8000/health IMAGE gateway --host 0.0.0.0 \
#       --engine-url http://engine:30000 --tenants /etc/moe-serve/tenants.yaml
# No secret is baked in: the admin key (MOE_SERVE_ADMIN_KEY) and REDIS_URL come from the environment at run time,
# tenants carry only SHA-256 digests of API keys.

# The official image of the SGLang release moe-serve pins (pyproject/scripts/setup.sh: 0.5.23); CUDA 13 builds.
ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.23-cu130

FROM ${SGLANG_IMAGE} AS gpu
ENV PYTHONUNBUFFERED=1 \
    HOME=/home/moe \
    MOE_SERVE_HEALTH_URL=http://127.0.0.1:30000/health
WORKDIR /app
COPY pyproject.toml README.md ./
COPY service ./service
COPY moe_sglang ./moe_sglang
# SGLang, torch and transformers come with the base image; our core dependencies are unpinned, so pip adds only what
# is missing. Editable, so the bundled model under service/models/assets stays where moe_sglang.launch looks for it.
# No moe_sglang.install_hook: its import-time adaptations exist for CPU-only machines (moe_sglang/boot.py).
# PIP_BREAK_SYSTEM_PACKAGES: the base image's SGLang lives in the system interpreter, which Debian/Ubuntu mark as
# externally managed (PEP 668); installing beside it is the point of this image.
RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir -e . \
 && useradd --create-home --home-dir /home/moe --uid 10001 --user-group moe
USER 10001:10001
EXPOSE 30000 8000
HEALTHCHECK --interval=30s --timeout=25s --start-period=600s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['MOE_SERVE_HEALTH_URL'], timeout=20)"]
ENTRYPOINT ["moe-serve"]
CMD ["engine", "--host", "0.0.0.0", "--device", "cuda", "--", "--enable-metrics"]

FROM python:3.11-slim AS cpu-build
# A compiler for the few SGLang dependencies that build from source and for the CPU engine's stream GEMM kernel
# (setup.sh builds it into /app/build/extensions, which the runtime stage copies); left behind in this stage.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential ninja-build \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . .
# PyPI's torch 2.13.0 for Linux is the CUDA build (GBs of NVIDIA wheels); put the CPU build in the venv first, which
# setup.sh's `torch==2.13.0` then finds satisfied (2.13.0+cpu matches: local version labels are ignored).
RUN python3 -m venv .venv \
 && .venv/bin/pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && PYTHON=python3 bash scripts/setup.sh \
 && rm -rf /root/.cache

FROM python:3.11-slim AS cpu
ENV PYTHONUNBUFFERED=1 \
    HOME=/home/moe \
    PATH=/app/.venv/bin:$PATH \
    MOE_SERVE_HEALTH_URL=http://127.0.0.1:30000/health \
    MOE_SERVE_PLAN_DIR=/home/moe/.cache/moe-serve/gemm-plans
# MOE_SERVE_PLAN_DIR: the CPU engine keeps its timed product forms there (service/kernels/plan_cache.py); /app is
# not the runtime user's to write
RUN useradd --create-home --home-dir /home/moe --uid 10001 --user-group moe
# The virtual environment's interpreter links to this same base image's /usr/local/bin/python3.
COPY --from=cpu-build /app /app
WORKDIR /app
USER 10001:10001
EXPOSE 30000 8000
HEALTHCHECK --interval=30s --timeout=25s --start-period=300s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['MOE_SERVE_HEALTH_URL'], timeout=20)"]
ENTRYPOINT ["moe-serve"]
CMD ["engine", "--host", "0.0.0.0", "--device", "cpu", "--", "--enable-metrics"]
