"""Prompt sets: the built-in 50 prompts (labelled by domain) and user files (JSONL or ShareGPT JSON).

Probe stage (a source). Acceptance depends on the domain (code drafts well, creative writing badly), so every
prompt carries a domain label and results are broken down by it.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..errors import PromptFileError


@dataclass(frozen=True, slots=True)
class Prompt:
    id: str
    domain: str
    text: str | None = None
    messages: tuple[tuple[str, str], ...] = ()  # (role, content)

    def as_text(self) -> str:
        if self.text is not None:
            return self.text
        return "\n".join(content for _, content in self.messages)

    def as_messages(self) -> list[dict[str, str]]:
        if self.messages:
            return [{"role": r, "content": c} for r, c in self.messages]
        return [{"role": "user", "content": self.text or ""}]


def builtin() -> list[Prompt]:
    """The 50 built-in prompts, domains interleaved so that even a short run covers all five."""
    raw = importlib.resources.files("specwatch.probe").joinpath("data/prompts.jsonl").read_bytes()
    return [_from_obj(orjson.loads(line), f"builtin:{i}", i) for i, line in enumerate(raw.splitlines(), 1)]


def _from_obj(obj: Any, where: str, index: int) -> Prompt:
    if not isinstance(obj, dict):
        raise PromptFileError(f"{where}: expected a JSON object")
    pid = str(obj.get("id", f"p{index:04d}"))
    domain = str(obj.get("domain", "unlabelled"))
    text = obj.get("text", obj.get("prompt"))
    if isinstance(text, str) and text:
        return Prompt(pid, domain, text=text)
    msgs = obj.get("messages")
    if isinstance(msgs, list) and msgs and all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in msgs):
        return Prompt(pid, domain, messages=tuple((str(m.get("role", "user")), m["content"]) for m in msgs))
    raise PromptFileError(f"{where}: needs a non-empty \"text\" (or \"prompt\") string or a \"messages\" list")


def _sharegpt(items: list[Any], path: Path) -> list[Prompt]:
    out = []
    for i, item in enumerate(items):
        conv = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(conv, list):
            continue
        first = next((t.get("value") for t in conv if isinstance(t, dict) and t.get("from") in ("human", "user")),
                     None)
        if isinstance(first, str) and first.strip():
            out.append(Prompt(str(item.get("id", f"sharegpt-{i}")), "sharegpt", text=first))
    if not out:
        raise PromptFileError(f"{path}: a JSON list, but no ShareGPT conversations with a human turn")
    return out


def read(path: str) -> list[Prompt]:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise PromptFileError(f"--prompts {path}: {exc.strerror}") from None
    stripped = data.lstrip()
    if stripped.startswith(b"["):
        try:
            items = orjson.loads(stripped)
        except orjson.JSONDecodeError as exc:
            raise PromptFileError(f"{path}: invalid JSON: {exc}") from None
        return _sharegpt(items, p)
    prompts = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise PromptFileError(f"{path}:{n}: invalid JSON: {exc}") from None
        prompts.append(_from_obj(obj, f"{path}:{n}", n))
    if not prompts:
        raise PromptFileError(f"{path}: no prompts")
    return prompts
