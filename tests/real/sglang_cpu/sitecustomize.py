"""Import hook of specwatch's SGLang CPU stand-ins (on ``PYTHONPATH``, Python's ``site`` imports it in every
process of the server): when SGLang 0.5.23 imports one of the modules below, the matching function of
``sglang_cpu_patches`` patches it right after it ran. The installed wheel is never changed.

- ``sglang.srt.layers.attention.torch_native_backend``: ``TorchNativeAttnBackend.forward_extend`` gets the
  speculative-verify branch it lacks;
- ``sglang.srt.speculative.draft_utils``: ``DraftBackendFactory._create_backend`` accepts ``torch_native`` for
  EAGLE drafting.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

PATCHED = {
    "sglang.srt.layers.attention.torch_native_backend": "patch_torch_native_backend",
    "sglang.srt.speculative.draft_utils": "patch_draft_utils",
}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in PATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            import sglang_cpu_patches

            getattr(sglang_cpu_patches, PATCHED[fullname])(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _PatchAfterImport())
