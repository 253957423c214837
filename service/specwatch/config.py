"""``specwatch run`` configuration: one table of options, read from flags > SPECWATCH_* env > TOML > default.

Strict: an unknown key (in the file or as a ``SPECWATCH_`` variable) or a bad value stops start-up with a
message naming the key, where it came from, and what is allowed.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from .client import APIS
from .urls import UrlError, parse_base_url

DEFAULT_LISTEN = "127.0.0.1:9753"
ENV_PREFIX = "SPECWATCH_"


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Config:
    server_url: str = ""
    api: str = "auto"
    log_file: str | None = None
    log_cmd: str | None = None
    log_stdin: bool = False
    from_start: bool = False
    listen: str = DEFAULT_LISTEN
    baseline_tps: float | None = None
    baseline_url: str | None = None
    rate: float | None = None
    concurrency: int = 1
    pause_s: float = 2.0
    max_tokens: int = 256
    temperature: float = 0.0
    prompts: str | None = None
    interval_s: float = 10.0
    verdict_window_s: int = 60
    windows_s: str = "60,300"
    server_metrics: bool = False
    hysteresis: float = 0.03
    min_requests: int = 3
    hlog: str | None = None
    read_timeout_s: float = 60.0
    connect_timeout_s: float = 5.0
    drain_timeout_s: float = 30.0
    view: str = "auto"  # auto | table | log

    @property
    def windows(self) -> tuple[int, ...]:
        return tuple(sorted({int(w) for w in self.windows_s.split(",")} | {self.verdict_window_s}))

    @property
    def listen_host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)


def _positive(kind: type) -> Callable[[str, Any], Any]:
    def check(key: str, v: Any) -> Any:
        x = _typed(kind)(key, v)
        if x <= 0:
            raise ConfigError(f"{key}: must be > 0, got {v!r}")
        return x
    return check


def _typed(kind: type) -> Callable[[str, Any], Any]:
    def check(key: str, v: Any) -> Any:
        if isinstance(v, str) and kind is not str:
            try:
                v = {"true": True, "false": False}[v.lower()] if kind is bool else kind(v)
            except (ValueError, KeyError):
                raise ConfigError(f"{key}: expected {kind.__name__}, got {v!r}") from None
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, kind) or (kind is not bool and isinstance(v, bool)):
            raise ConfigError(f"{key}: expected {kind.__name__}, got {v!r}")
        return v
    return check


def _choice(*allowed: str) -> Callable[[str, Any], Any]:
    def check(key: str, v: Any) -> Any:
        if v not in allowed:
            raise ConfigError(f"{key}: {v!r} is not one of {', '.join(allowed)}")
        return v
    return check


def _url(key: str, v: Any) -> str:
    try:
        return parse_base_url(_typed(str)(key, v))
    except UrlError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def _listen(key: str, v: Any) -> str:
    s = _typed(str)(key, v)
    _host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{key}: {s!r} must be HOST:PORT with a port from 1 to 65535")
    return s


def _window_list(key: str, v: Any) -> str:
    s = _typed(str)(key, v)
    parts = [p.strip() for p in s.split(",")]
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ConfigError(f"{key}: {s!r} must be a comma-separated list of window lengths in seconds, e.g. 60,300")
    return ",".join(parts)


def _ratio(key: str, v: Any) -> float:
    x = float(_typed(float)(key, v))
    if not 0 <= x < 1:
        raise ConfigError(f"{key}: must be in [0, 1), got {v!r}")
    return x


CHECKS: dict[str, tuple[Callable[[str, Any], Any], str]] = {
    "server_url": (_url, "URL of the speculative server (http://host:port)"),
    "api": (_choice("auto", *APIS), "auto | sglang | completions | chat"),
    "log_file": (_typed(str), "follow this server log file (across rotation and truncation)"),
    "log_cmd": (_typed(str), "read server logs from this command's stdout (restarted when it exits)"),
    "log_stdin": (_typed(bool), "read server logs from stdin"),
    "from_start": (_typed(bool), "read --log-file from its start instead of its end"),
    "listen": (_listen, f"HOST:PORT for /metrics and the API (default {DEFAULT_LISTEN})"),
    "baseline_tps": (_positive(float), "non-speculative decode tok/s to compare against"),
    "baseline_url": (_url, "a non-speculative server probed A/B with the same prompts"),
    "rate": (_positive(float), "open-loop probe rate (requests/s) instead of closed loop"),
    "concurrency": (_positive(int), "closed-loop probe streams (default 1)"),
    "pause_s": (_typed(float), "pause between a stream's probes in seconds (default 2)"),
    "max_tokens": (_positive(int), "tokens per probe (default 256)"),
    "temperature": (_typed(float), "probe sampling temperature (default 0)"),
    "prompts": (_typed(str), "prompt file (JSONL or ShareGPT JSON); default: built-in set"),
    "interval_s": (_positive(float), "interval between window updates in seconds (default 10)"),
    "verdict_window_s": (_positive(int), "window for tok/s, speedup and verdict, seconds (default 60)"),
    "windows_s": (_window_list, "rolling windows in seconds, comma-separated (default 60,300)"),
    "server_metrics": (_typed(bool), "also scrape the server's own /metrics for accept length"),
    "hysteresis": (_ratio, "speedup must exceed 1 + this to clear the below-baseline state (default 0.03)"),
    "min_requests": (_positive(int), "requests in the verdict window before a verdict (default 3)"),
    "hlog": (_typed(str), "write an HdrHistogram interval log here"),
    "read_timeout_s": (_positive(float), "longest silence within one stream (default 60)"),
    "connect_timeout_s": (_positive(float), "connect timeout (default 5)"),
    "drain_timeout_s": (_positive(float), "on SIGTERM, wait this long for probes in flight (default 30)"),
    "view": (_choice("auto", "table", "log"), "terminal table (auto when stdout is a TTY) or log lines"),
}
assert set(CHECKS) == {f.name for f in fields(Config)}
BOOL_KEYS = {f.name for f in fields(Config) if f.type == "bool"}


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="TOML file with any of the options below")
    for key, (_check, help_) in CHECKS.items():
        flag = "--" + key.replace("_", "-")
        if key in BOOL_KEYS:
            p.add_argument(flag, dest=key, action="store_const", const=True, default=None, help=help_)
        else:
            p.add_argument(flag, dest=key, default=None, help=help_)


def _layer(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    out = {}
    for key, raw in values.items():
        if key not in CHECKS:
            raise ConfigError(f"{where}: unknown option {key!r} (allowed: {', '.join(CHECKS)})")
        try:
            out[key] = CHECKS[key][0](key, raw)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return out


def load(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Config:
    environ = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    path = args.config or environ.get(ENV_PREFIX + "CONFIG")
    if path:
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
        merged.update(_layer(doc, f"config file {path}"))
    env = {k[len(ENV_PREFIX):].lower(): v for k, v in environ.items()
           if k.startswith(ENV_PREFIX) and k != ENV_PREFIX + "CONFIG"}
    merged.update(_layer(env, "environment (SPECWATCH_*)"))
    flags = {k: v for k, v in vars(args).items() if k in CHECKS and v is not None}
    merged.update(_layer(flags, "command line"))
    cfg = Config(**merged)
    if not cfg.server_url:
        raise ConfigError("server_url is required (--server-url, SPECWATCH_SERVER_URL or server_url in the file)")
    sources = sum(1 for s in (cfg.log_file, cfg.log_cmd, cfg.log_stdin or None) if s)
    if sources > 1:
        raise ConfigError("log_file, log_cmd and log_stdin are alternatives: give at most one")
    if cfg.baseline_tps is not None and cfg.baseline_url is not None:
        raise ConfigError("baseline_tps and baseline_url are alternatives: give at most one")
    if cfg.pause_s < 0:
        raise ConfigError(f"pause_s: must be >= 0, got {cfg.pause_s}")
    return cfg
