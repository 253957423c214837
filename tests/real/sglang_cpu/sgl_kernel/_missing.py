"""What the stand-in ``sgl_kernel`` answers for a name it does not provide: an object that SGLang may import
(its CPU engine imports many kernels at module level, on paths a text model on the torch_native backend never
takes) but that raises, naming itself, the moment it is called. A path the stand-in does not cover fails
loudly instead of computing nonsense."""

from __future__ import annotations

from typing import Any, NoReturn

HOME = "specwatch tests/real/sglang_cpu/sgl_kernel"


class StandInMissing(NotImplementedError):
    """SGLang called a kernel that the stand-in does not provide."""


class Missing:
    """``sgl_kernel.<name>``: importable, never callable."""

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise StandInMissing(f"{self._qualname} was called, but {HOME} (a stand-in for SGLang's CPU kernel package) "
                             "does not provide it: SGLang took a path the stand-in does not cover")

    def __getattr__(self, name: str) -> Missing:
        if name.startswith("__"):
            raise AttributeError(name)
        return Missing(f"{self._qualname}.{name}")

    def __repr__(self) -> str:
        return f"<missing {self._qualname} ({HOME})>"


def module_getattr(module: str, submodules: frozenset[str] = frozenset()) -> Any:
    """A module ``__getattr__`` answering every public name with ``Missing``, except dunders and the names in
    ``submodules`` (so ``from sgl_kernel import flash_attn`` falls through to an import, which fails)."""

    def __getattr__(name: str) -> Missing:
        if name.startswith("__") or name in submodules:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return Missing(f"{module}.{name}")

    return __getattr__
