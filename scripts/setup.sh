#!/usr/bin/env bash
# Sets up .venv for the embedded CPU default: torch 2.13.0 (CPU), SGLang 0.5.23 without its CUDA-only
# requirements, the Python files of sglang-kernel 0.4.10 (no compiled ops), and moe-serve itself.
# Idempotent: a stamp keyed on the dependency files skips work already done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SGLANG_VERSION=0.5.23
SGL_KERNEL_VERSION=0.4.10
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
stamp=.venv/.moe-serve-$(cat deps/* scripts/setup.sh | sha256sum | cut -c1-16)

if [ ! -f "$stamp" ]; then
  "${PIP[@]}" install --upgrade pip
  # The CPU wheel of torch: found locally on machines of this kind (pip's find-links), else PyPI's CPU index.
  "${PIP[@]}" install torch==2.13.0 || "${PIP[@]}" install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
  "${PIP[@]}" install -c deps/constraints-cpu.txt -r deps/sglang-cpu.txt
  "${PIP[@]}" install --no-deps "sglang==${SGLANG_VERSION}" "timm==1.0.25"
  # torchvision is imported on SGLang's config path (deepseek_ocr); PyPI's build is CUDA-linked, so it
  # is installed without deps and made importable by moe_sglang.boot (see there).
  "${PIP[@]}" install --no-deps "torchvision==0.28.0"
  # sglang-kernel has no CPU build and no sdist: unpack only its Python files into site-packages.
  tmp=$(mktemp -d)
  "${PIP[@]}" download --no-deps --only-binary=:all: "sglang-kernel==${SGL_KERNEL_VERSION}" -d "$tmp"
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  .venv/bin/python - "$tmp"/sglang_kernel-*.whl "$site" <<'PYEOF'
import sys, zipfile
wheel, site = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(".py") or ".dist-info/" in n]
    z.extractall(site, members=names)
print(f"sglang-kernel: {len(names)} Python files unpacked, compiled ops left out")
PYEOF
  rm -rf "$tmp"
  touch "$stamp"
fi
"${PIP[@]}" install -c deps/constraints-cpu.txt -e ".[engine,test,bench,dev,loadtest,deploy]"
.venv/bin/python -m moe_sglang.install_hook
# The CPU engine's stream GEMM kernel (service/kernels/stream_gemm.py), built for this machine's CPU now so the
# first engine start does not wait for the compiler (~25 s); without a compiler the engine keeps its torch forms.
.venv/bin/python -c 'from service.kernels import stream_gemm as s; print("stream GEMM:", s.best_isa() if s.load() else s.error())' \
  || echo "stream GEMM not built (the CPU engine uses its torch forms)"
