"""``specwatch run``'s settings: the option table's values from flags > SPECWATCH_* env > TOML > default.

Strict: an unknown key (in the file or as a ``SPECWATCH_`` variable) or a bad value stops start-up with a
message naming the key, where it came from, and what is allowed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .errors import ConfigError
from .options import add_config_flag, add_flags, default, from_flags, read_secret_file
from .records import TARGETS, ApiChoice, TargetName

__all__ = ["Config", "add_run_flags", "check", "read"]



@dataclass(frozen=True, slots=True)
class Config:
    server_url: str = default("server_url")
    api: ApiChoice = default("api")
    log_file: str | None = default("log_file")
    log_cmd: str | None = default("log_cmd")
    log_stdin: bool = default("log_stdin")
    from_start: bool = default("from_start")
    listen: str = default("listen")
    baseline_tps: float | None = default("baseline_tps")
    baseline_url: str | None = default("baseline_url")
    baseline_curve: str | None = default("baseline_curve")
    load_curve_window_s: int = default("load_curve_window_s")
    advisor_prior: str | None = default("advisor_prior")
    advisor_max_steps: int = default("advisor_max_steps")
    speculative_config: str | None = default("speculative_config")  # vLLM's own JSON, for the advice's flags
    rate_per_s: float | None = default("rate_per_s")
    concurrency: int = default("concurrency")
    pause_s: float = default("pause_s")
    max_tokens: int = default("max_tokens", "run")
    temperature: float = default("temperature")
    prompts: str | None = default("prompts")
    interval_s: float = default("interval_s")
    verdict_window_s: int = default("verdict_window_s")
    windows_s: tuple[float, ...] = default("windows_s")  # sorted, each once (options.window_list)
    server_metrics: bool = default("server_metrics")
    hysteresis: float = default("hysteresis")
    min_requests: int = default("min_requests")
    hlog: str | None = default("hlog")
    read_timeout_s: float = default("read_timeout_s")
    connect_timeout_s: float = default("connect_timeout_s")
    request_timeout_s: float = default("request_timeout_s")
    api_key: str | None = default("api_key")
    api_key_file: str | None = default("api_key_file")
    ca_file: str | None = default("ca_file")
    api_token: str | None = default("api_token")
    api_token_file: str | None = default("api_token_file")
    drain_timeout_s: float = default("drain_timeout_s")
    view: str = default("view")  # auto | table | log
    workers: int = default("workers")
    tokenizer: str | None = default("tokenizer")

    @property
    def windows(self) -> tuple[float, ...]:
        """Every window kept, in seconds: ``windows_s`` and the verdict window."""
        return tuple(sorted({*self.windows_s, float(self.verdict_window_s)}))

    @property
    def listen_host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)

    def __repr__(self) -> str:  # the API key never reaches a log line or a traceback
        return f"Config(server_url={self.server_url!r}, api_key={'<set>' if self.api_key else None}, …)"

    @property
    def targets(self) -> tuple[TargetName, ...]:
        return TARGETS if self.baseline_url else TARGETS[:1]


DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Config)}
MAX_INTERVALS_KEPT = 10_000  # memory is bounded by (longest window / interval) interval histograms


def add_run_flags(p: argparse.ArgumentParser) -> None:
    add_config_flag(p)
    add_flags(p, DEFAULTS)


def read(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Config:
    cfg = check(Config(**from_flags(args, DEFAULTS, os.environ if environ is None else environ)))
    # secret files are read once at start: a missing or unreadable one stops start-up, naming the file
    if cfg.api_key_file:
        cfg = dataclasses.replace(cfg, api_key=read_secret_file("api_key_file", cfg.api_key_file))
    if cfg.api_token_file:
        cfg = dataclasses.replace(cfg, api_token=read_secret_file("api_token_file", cfg.api_token_file))
    return cfg


def check(cfg: Config) -> Config:
    """Rules between options; every ``Config`` a command builds passes here."""
    if not cfg.server_url:
        raise ConfigError("server_url is required (--server-url, SPECWATCH_SERVER_URL or server_url in the file)")
    sources = sum(1 for s in (cfg.log_file, cfg.log_cmd, cfg.log_stdin or None) if s)
    if sources > 1:
        raise ConfigError("log_file, log_cmd and log_stdin are alternatives: give at most one")
    if sum(x is not None for x in (cfg.baseline_tps, cfg.baseline_url, cfg.baseline_curve)) > 1:
        raise ConfigError("baseline_tps, baseline_url and baseline_curve are alternatives: give at most one")
    intervals = max(cfg.windows) / cfg.interval_s
    if intervals > MAX_INTERVALS_KEPT:
        raise ConfigError(f"windows_s / interval_s: the longest window ({max(cfg.windows):.15g} s) would keep "
                          f"{intervals:.0f} intervals of {cfg.interval_s:g} s; at most {MAX_INTERVALS_KEPT} "
                          "(raise interval_s or shorten the window)")
    for secret in ("api_key", "api_token"):
        if getattr(cfg, secret) and getattr(cfg, secret + "_file"):
            raise ConfigError(f"{secret} and {secret}_file are alternatives: give at most one")
    return cfg
