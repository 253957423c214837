"""Stand-in for ``sgl_kernel.mamba``: SGLang 0.5.23 imports it unconditionally on CPU
(``srt/layers/attention/linear/gdn_backend.py``, ``kda_backend.py``, ``linear/kernels/gdn_triton.py``) for
linear-attention models, which the real tier never serves. Every name imports; calling one raises, naming
itself."""

from __future__ import annotations

from ._missing import module_getattr

__getattr__ = module_getattr(__name__)
