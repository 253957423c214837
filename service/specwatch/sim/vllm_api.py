"""The simulator's vLLM surface: the OpenAI routes in vLLM's wire format (``openai.OpenAIAPI`` with the ``VLLM``
flavour of ``flavours.py``), and what only vLLM has: ``/health``, ``/version``, ``/metrics`` and the per-request
speculative metrics of ``--per-request-spec-decode-metrics``.

Shapes are vLLM 0.32/0.33's (the reference's verbatim streams; tests/integration/test_sim_vllm.py pins
them): one chunk per engine step, so a chunk carries every token a verify round accepted; the chat stream's
first chunk carries only the role, sent with the first token; ``stream_options.include_usage`` adds a final
chunk with ``choices: []`` and the usage, ``continuous_usage_stats`` adds the usage to every chunk; with
``--per-request-spec-decode-metrics`` the usage chunk carries ``metrics.speculative_decoding``. There is no
``/generate`` and no ``/get_server_info`` (404, as on vLLM).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from .engine import Engine, SimRequest
from .faults import FaultPlan
from .flavours import VLLM
from .openai import OpenAIAPI
from .wire import ServerIdentity, json_response


class VLLMAPI(OpenAIAPI):
    def __init__(self, engine: Engine, ident: ServerIdentity, metrics_render: Callable[[], bytes] | None,
                 faults: FaultPlan | None = None, spec_metrics: str = "none", max_model_len: int = 4096) -> None:
        super().__init__(engine, ident, faults, VLLM, max_model_len)
        self.metrics_render = metrics_render
        self.spec_metrics = spec_metrics

    def routes(self, app: web.Application) -> None:
        super().routes(app)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        if self.metrics_render is not None:
            app.router.add_get("/metrics", self.metrics)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return json_response({"version": self.ident.version})

    async def metrics(self, request: web.Request) -> web.Response:
        assert self.metrics_render is not None
        return web.Response(body=self.metrics_render(), headers={"Content-Type": "text/plain; version=0.0.4"})

    def request_metrics(self, req: SimRequest) -> dict[str, Any] | None:
        spec = self.engine.s.spec
        if self.spec_metrics == "none" or not spec.enabled or req.verify_ct == 0:
            return None
        drafted = req.draft_tokens
        return {"speculative_decoding": {
            "mean_acceptance_length": 1.0 + req.accepted_drafts / req.verify_ct,
            "draft_acceptance_rate": req.accepted_drafts / drafted if drafted else 0.0,
            "acceptance_histogram": list(req.hist), "num_spec_steps": req.verify_ct,
            "num_accepted_draft_tokens": req.accepted_drafts, "num_draft_tokens": drafted,
            "num_spec_tokens": spec.num_steps}}
