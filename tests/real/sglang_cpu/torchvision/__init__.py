"""Import-only stand-in for ``torchvision``: the registry has only CUDA builds of it, which do not load beside
torch's CPU build, and SGLang 0.5.23 imports it at module level in multimodal helpers that a text model never
calls (``srt/multimodal/internvl_utils.py``: ``import torchvision.transforms as T``,
``from torchvision.transforms.functional import InterpolationMode``; likewise ``srt/configs/deepseek_ocr.py``).

Every ``torchvision.<x>`` submodule imports and every attribute resolves (``InterpolationMode.BICUBIC`` as a
default argument works); anything *called* raises ``NotImplementedError`` naming itself. No distribution
metadata is installed, so transformers' ``is_torchvision_available()`` stays false.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, NoReturn

__version__ = "0.0.0+specwatch.standin"


class Missing:
    """``torchvision.<path>``: resolves, never callable."""

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"{self._qualname} was called, but torchvision here is specwatch's import-only "
                                  "stand-in (tests/real/sglang_cpu/torchvision): a text model never needs it")

    def __getattr__(self, name: str) -> Missing:
        if name.startswith("__"):
            raise AttributeError(name)
        return Missing(f"{self._qualname}.{name}")

    def __repr__(self) -> str:
        return f"<torchvision stand-in {self._qualname}>"


def _module_getattr(module: str) -> Any:
    def __getattr__(name: str) -> Missing:
        if name.startswith("__"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return Missing(f"{module}.{name}")

    return __getattr__


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds every ``torchvision.*`` submodule: an empty package answering as ``Missing``."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(__name__ + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = types.ModuleType(spec.name, f"specwatch's import-only stand-in for {spec.name}")
        mod.__path__ = []
        mod.__getattr__ = _module_getattr(spec.name)  # type: ignore[method-assign]
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


if not any(isinstance(f, _Submodules) for f in sys.meta_path):
    sys.meta_path.insert(0, _Submodules())

__getattr__ = _module_getattr(__name__)
