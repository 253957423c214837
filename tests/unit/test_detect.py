"""Which endpoints detection asks, in which order, and what it concludes: SGLang's ``/server_info`` first
(0.5.23 logs a deprecation warning on every ``/get_server_info``), ``/get_server_info`` only for servers
older than 0.5.6, which have no ``/server_info``."""

from __future__ import annotations

from typing import Any

import pytest

from specwatch.probe import detect

SGLANG = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "version": "0.5.23"}
OLD_SGLANG = {"speculative_algorithm": None, "version": "0.4.6"}
MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "sglang"}]}
VLLM_MODELS = {"object": "list", "data": [{"id": "v", "object": "model", "owned_by": "vllm"}]}
VLLM_DEV_INFO = {"vllm_config": "...", "vllm_env": {}, "system_env": {}}  # dev mode's /server_info


@pytest.mark.parametrize(("answers", "asked", "engine", "speculative"), [
    ({"/server_info": SGLANG, "/get_server_info": SGLANG, "/v1/models": MODELS},
     ["/server_info", "/v1/models"], "sglang", True),
    ({"/get_server_info": OLD_SGLANG, "/v1/models": MODELS},  # before 0.5.6: the old name only
     ["/server_info", "/get_server_info", "/v1/models"], "sglang", False),
    ({"/server_info": VLLM_DEV_INFO, "/v1/models": VLLM_MODELS, "/version": {"version": "0.33.0"}},
     ["/server_info", "/get_server_info", "/v1/models", "/version", "/metrics"], "vllm", False),
])
async def test_server_info_is_asked_first_and_get_server_info_only_when_it_does_not_answer(
        monkeypatch, answers, asked, engine, speculative):
    seen: list[str] = []

    async def get_json(session: Any, url: str) -> Any:
        path = url.removeprefix("http://t")
        seen.append(path)
        return answers.get(path)

    async def get_text(session: Any, url: str) -> tuple[int, str]:
        seen.append(url.removeprefix("http://t"))
        return 200, ""

    monkeypatch.setattr(detect, "get_json", get_json)
    monkeypatch.setattr(detect, "get_text", get_text)
    info = await detect.detect(None, "http://t")  # type: ignore[arg-type]
    assert seen == asked
    assert (info.engine, info.speculative) == (engine, speculative)
