"""Write the `.pth` file that activates `moe_sglang.boot` in every Python process of this environment.

A `.pth` line that starts with `import` is executed by `site` at interpreter start; this is the only way to run code in
the subprocesses SGLang spawns before they import `sgl_kernel` (too early for SGLang's own plugin mechanism).
Run: `python -m moe_sglang.install_hook` (scripts/setup.sh does). `--remove` deletes it.
"""

from __future__ import annotations

import argparse
import sysconfig
from pathlib import Path

PTH_NAME = "moe_serve_boot.pth"
# One line; guarded so an environment without moe_sglang keeps working.
PTH_LINE = (
    "import importlib.util as _u; "
    "_u.find_spec('moe_sglang') and __import__('moe_sglang.boot', fromlist=['install']).install()\n"
)


def pth_path() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / PTH_NAME


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--remove", action="store_true")
    args = parser.parse_args(argv)
    path = pth_path()
    if args.remove:
        path.unlink(missing_ok=True)
        print(f"removed {path}")
    else:
        path.write_text(PTH_LINE)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
