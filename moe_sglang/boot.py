"""Import-time adaptations that must exist before SGLang's own modules run, in every process.

Installed as a `sys.meta_path` finder by a `.pth` file (see `install_hook.py`), so it is active in the server process,
the scheduler/detokenizer subprocesses SGLang spawns, and test processes alike. It costs nothing until one of the two
modules below is imported, and it never imports torch by itself. Why each adaptation exists:

1. `sgl_kernel.load_utils`: the `sglang-kernel` wheel ships only CUDA builds of its compiled ops. On a CPU machine we
   install just its Python files, and `import sgl_kernel` (done while `sglang.srt.entrypoints.engine` imports) would
   raise from `_load_architecture_specific_ops`. We wrap that loader: when no compiled library loads, it returns an empty
   module and the torch versions of the ops we need are registered later by our SGLang plugin. Where a real build loads
   (GPU machines), it is used untouched.
2. `torchvision`: PyPI's torchvision is linked against CUDA torch. On CPU torch its C extension fails to load, and then
   its meta registrations for `torchvision::nms`/`qnms` fail because those operator schemas were never defined, which
   breaks `import torchvision` (imported on SGLang's config path, `srt/configs/deepseek_ocr.py`). We try to load the
   extension first; only if that fails do we define the two schemas (no kernels: the text path never calls them).

Set MOE_SERVE_NO_BOOT=1 to turn all of this off.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import types
from collections.abc import Callable

logger = logging.getLogger(__name__)

_TORCHVISION_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)


def _stub_missing_sgl_kernel_library(module: types.ModuleType) -> None:
    load = module._load_architecture_specific_ops

    def load_or_empty():
        try:
            return load()
        except ImportError:
            logger.info("sgl_kernel: no compiled ops for this machine; moe-serve registers torch versions")
            return types.ModuleType("common_ops")

    module._load_architecture_specific_ops = load_or_empty


class _BootFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of a few modules with a before/after step."""

    def __init__(self) -> None:
        self._before: dict[str, Callable[[importlib.machinery.ModuleSpec], None]] = {
            "torchvision": self._define_torchvision_schemas,
        }
        self._after: dict[str, Callable[[types.ModuleType], None]] = {
            "sgl_kernel.load_utils": _stub_missing_sgl_kernel_library,
        }
        self._libraries: list[object] = []  # torch.library.Library objects must stay alive
        self.applied: list[str] = []  # module names adapted in this process, for checks and tests

    def find_spec(self, fullname, path, target=None):
        if fullname not in self._before and fullname not in self._after:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        if fullname in self._before:
            self._before[fullname](spec)
        if fullname in self._after:
            spec.loader = _AfterLoader(spec.loader, self._after[fullname])
        self.applied.append(fullname)
        return spec

    def _define_torchvision_schemas(self, spec: importlib.machinery.ModuleSpec) -> None:
        import torch

        if hasattr(torch.ops.torchvision, "nms"):
            return
        for location in spec.submodule_search_locations or []:
            for name in sorted(os.listdir(location)):
                if name.startswith("_C") and name.endswith(".so"):
                    try:
                        torch.ops.load_library(os.path.join(location, name))
                        return
                    except OSError as err:
                        logger.info("torchvision's C extension does not load here (%s); defining its schemas", err)
        library = torch.library.Library("torchvision", "FRAGMENT")
        for schema in _TORCHVISION_SCHEMAS:
            library.define(schema)
        self._libraries.append(library)


class _AfterLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, after: Callable[[types.ModuleType], None]) -> None:
        self._loader = loader
        self._after = after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._after(module)


def installed_finder() -> _BootFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, _BootFinder)), None)


def install() -> None:
    """Put the finder first on sys.meta_path, once per process."""
    if os.environ.get("MOE_SERVE_NO_BOOT") == "1" or installed_finder() is not None:
        return
    sys.meta_path.insert(0, _BootFinder())
