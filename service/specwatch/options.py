"""The option table every command draws from: one name, one unit, one check and one message per option.

``run``, ``bench`` and ``sweep`` take the same flags for the same things (``--max-tokens``,
``--read-timeout-s``, …) and reject a bad value with the same message, naming the key and where the value
came from: ``command line: max_tokens: must be > 0, got '0'``. Library packages never see argparse: each
command turns the validated values into its own typed settings.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .errors import ConfigError, UrlError
from .records import APIS
from .redaction import redact

Check = Callable[[str, Any], Any]
DEFAULT_LISTEN = "127.0.0.1:9753"
ENV_PREFIX = "SPECWATCH_"


def parse_base_url(url: str) -> str:
    """Return ``scheme://host[:port]`` (no trailing slash) or raise ``UrlError`` saying what is wrong.
    Messages show the URL with any credentials redacted."""
    shown = redact(url)
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise UrlError(f"{shown!r} is not a valid URL") from None
    if parts.username is not None or parts.password is not None:
        raise UrlError(f"{shown!r}: credentials in the URL are not used; give the API key in SPECWATCH_API_KEY "
                       "or --api-key-file")
    if parts.scheme not in ("http", "https"):
        raise UrlError(f"{shown!r} must start with http:// or https://")
    if not parts.hostname:
        raise UrlError(f"{shown!r} has no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise UrlError(f"{shown!r} must be a base URL without a path (e.g. http://127.0.0.1:30000)")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + ("" if port is None else f":{port}")


def typed(kind: type) -> Check:
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
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{key}: must be a finite number, got {v!r}")
        return v
    return check


def at_least(kind: type, lo: float, strict: bool = False, hi: float | None = None) -> Check:
    def check(key: str, v: Any) -> Any:
        x = typed(kind)(key, v)
        if x < lo or (strict and x == lo):
            raise ConfigError(f"{key}: must be {'>' if strict else '>='} {lo:g}, got {v!r}")
        if hi is not None and x > hi:
            raise ConfigError(f"{key}: must be at most {hi:g}, got {v!r}")
        return x
    return check


def positive(kind: type, hi: float) -> Check:
    return at_least(kind, 0, strict=True, hi=hi)


DAY_S = 86_400.0


def rate_or_all(key: str, v: Any) -> float:
    """A request rate, or ``inf`` (``vllm bench serve --request-rate``'s default): every request at once."""
    if (isinstance(v, str) and v.strip().lower() in ("inf", "infinity")) or (isinstance(v, float) and v == math.inf):
        return math.inf
    try:
        return float(positive(float, 100_000)(key, v))
    except ConfigError as exc:
        raise ConfigError(f"{exc} (or inf: every request at once)") from None


def choice(*allowed: str) -> Check:
    def check(key: str, v: Any) -> Any:
        if v not in allowed:
            raise ConfigError(f"{key}: {v!r} is not one of {', '.join(allowed)}")
        return v
    return check


def url(key: str, v: Any) -> str:
    try:
        return parse_base_url(typed(str)(key, v))
    except UrlError as exc:
        raise UrlError(f"{key}: {exc}") from None


def listen(key: str, v: Any) -> str:
    s = typed(str)(key, v)
    _host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{key}: {s!r} must be HOST:PORT with a port from 1 to 65535")
    return s


MAX_WINDOW_S = 7 * DAY_S
DECIMAL = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # no nan, inf, "_" or other digits


def window_list(key: str, v: Any) -> tuple[float, ...]:
    """Window lengths in seconds, sorted, each once: from a comma-separated string (a flag, a variable, the
    file) or an array of numbers (the file)."""
    if isinstance(v, str):
        text, items = True, [p.strip() for p in v.split(",")] if v.strip() else []
    elif isinstance(v, list | tuple):
        text, items = False, list(v)
    else:
        raise ConfigError(f"{key}: expected window lengths in seconds, comma-separated (\"60,300\") or an array "
                          f"([60, 300]), got {v!r}")
    if not items:
        raise ConfigError(f"{key}: no window given: give one or more lengths in seconds, e.g. 60,300")
    return tuple(sorted({_window_s(key, x, text) for x in items}))


def _window_s(key: str, x: Any, text: bool) -> float:
    """One window: a decimal in a string, or a number in an array (a string there is refused)."""
    if not (DECIMAL.fullmatch(x) if text else isinstance(x, int | float) and not isinstance(x, bool)):
        raise ConfigError(f"{key}: {x!r} is not a number of seconds (window lengths, comma-separated: e.g. 60,300)")
    s = float(x)
    if not math.isfinite(s):
        raise ConfigError(f"{key}: must be a finite number of seconds, got {x!r}")
    if not 0 < s <= MAX_WINDOW_S:
        raise ConfigError(f"{key}: a window must be > 0 and at most {MAX_WINDOW_S:g} seconds (7 days), got {x!r}")
    return s


def int_list(key: str, v: Any) -> str:
    s = str(v) if isinstance(v, int) and not isinstance(v, bool) else typed(str)(key, v)
    parts = [p.strip() for p in s.split(",")]
    if not parts or not all(p.isascii() and p.isdigit() and 0 < int(p) <= 10_000 for p in parts):
        raise ConfigError(f"{key}: {s!r} must be a comma-separated list of stream counts from 1 to 10000, "
                          "e.g. 1,4,16,32")
    return ",".join(str(n) for n in sorted({int(p) for p in parts}))


def json_object(key: str, v: Any) -> str:
    s = typed(str)(key, v)
    try:
        ok = isinstance(json.loads(s), dict)
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"{key}: must be a JSON object, e.g. "
                          "'{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'")
    return s


def ratio(key: str, v: Any) -> float:
    x = float(typed(float)(key, v))
    if not 0 <= x < 1:
        raise ConfigError(f"{key}: must be in [0, 1), got {v!r}")
    return x


def secret(key: str, v: Any) -> str:
    """A secret (an API key): checked without ever echoing it."""
    if not isinstance(v, str) or not v.strip() or any(c in v.strip() for c in "\r\n"):
        raise ConfigError(f"{key}: must be a non-empty single-line string (value not shown)")
    return v.strip()


def read_secret_file(key: str, path: str) -> str:
    """The secret held in ``path`` (surrounding white space dropped); errors name the file, never its text."""
    try:
        with open(path, "rb") as f:
            raw = f.read(64 * 1024)
    except OSError as exc:
        raise ConfigError(f"{key}: {path}: {exc.strerror}") from None
    try:
        return secret(key, raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{key}: {path}: not UTF-8 text") from None


@dataclass(frozen=True, slots=True)
class Option:
    check: Check
    help: str
    many: bool = False  # may be given several times (a list)
    flag: bool = True  # False: environment and config file only (secrets never go on a command line)
    flag_name: str | None = None  # the flag, when it is not the key's (sweep's --concurrency takes a list)
    aliases: tuple[str, ...] = ()  # other flags for the same key (vllm bench serve's names)
    default: Any = None  # the one place a default is written; the commands' dataclasses read it (``default``)
    by_command: Mapping[str, Any] = field(default_factory=dict)  # where one command's default differs
    unit: str = ""  # printed after the default in --help: "(default: 5 s)"
    unset: str = "none"  # what --help says when the default is None
    negation: str = ""  # a flag on by default: what its --no- form does


OPTIONS: dict[str, Option] = {
    # the target and the probes: run, bench and sweep
    "server_url": Option(url, "URL of the (speculative) server, http://host:port", default="",
                         by_command={"sweep": "http://127.0.0.1:30000"}),  # where the launched server listens
    "api": Option(choice("auto", *APIS), "auto | sglang | completions | chat", default='auto'),
    "max_tokens": Option(positive(int, 1_000_000), "tokens per request", default=500, unit="tokens",
                         by_command={"run": 256}),  # the daemon's probes are gentle
    "temperature": Option(at_least(float, 0, hi=100), "sampling temperature", default=0.0),
    "ignore_eos": Option(typed(bool), "generate exactly --max-tokens tokens, ignoring the end-of-sequence token",
                         default=True, negation="stop at EOS"),
    "prompts": Option(typed(str), "prompt file (JSONL with text or messages, or ShareGPT JSON)",
                      unset="the 50 built-in prompts"),
    "concurrency": Option(positive(int, 10_000), "closed loop: streams in flight", default=1, unit="stream"),
    "rate_per_s": Option(positive(float, 100_000), "open loop: requests per second (instead of the closed loop)",
                         unset="none: closed loop"),
    "connect_timeout_s": Option(positive(float, DAY_S), "connect timeout in seconds", default=5.0, unit="s"),
    "read_timeout_s": Option(positive(float, DAY_S), "longest a stream may go without a token, in seconds",
                             default=60.0, unit="s"),
    "request_timeout_s": Option(positive(float, DAY_S), "whole-request deadline, in seconds", default=600.0,
                                unit="s"),
    "api_key": Option(secret, "the target's API key, sent as Authorization: Bearer", flag=False),
    "api_key_file": Option(typed(str), "read the target's API key from this file (or give it in SPECWATCH_API_KEY)",
                           unset="none: no key"),
    "ca_file": Option(typed(str), "CA bundle (PEM) to verify the target's TLS certificate",
                      unset="the system's CAs"),
    # bench
    "num_runs": Option(positive(int, 10_000_000), "measured requests (alias: vllm bench serve's --num-prompts)",
                       default=5, aliases=("--num-prompts",), unit="requests"),
    "warmup": Option(at_least(int, 0, hi=1_000_000), "warm-up requests, recorded apart and discarded", default=1,
                     unit="request"),
    "poisson": Option(typed(bool), "open loop: Poisson arrivals instead of constant", default=False),
    "max_in_flight": Option(positive(int, 100_000), "open loop: cap on streams in flight (waits are schedule lag)",
                            default=256, unit="streams"),
    "seed": Option(at_least(int, 0, hi=2**63 - 1), "seed of the Poisson and gamma arrivals", default=0),
    # vllm bench serve's traffic flags, with its meanings (bench)
    "request_rate": Option(rate_or_all, "vllm bench serve's name for --rate-per-s, with its default arrivals: "
                                        "requests per second, Poisson unless --burstiness says otherwise; inf: "
                                        "every request at once (closed loop of --max-concurrency streams, else one "
                                        "stream per request)"),
    "burstiness": Option(positive(float, 1_000), "open loop: vllm bench serve's gamma arrivals of this shape (1: "
                                                 "Poisson; < 1 burstier, > 1 more even); with --request-rate or "
                                                 "--rate-per-s"),
    "max_concurrency": Option(positive(int, 100_000), "vllm bench serve's name: streams in flight, = --concurrency in "
                                                      "the closed loop, = --max-in-flight with a request rate",
                             unset="none: --concurrency, --max-in-flight"),
    "verbose": Option(typed(bool), "print the seed script's line for every request (Run i/N: … tok/s) instead of "
                                   "the progress bar", default=False),
    "workers": Option(positive(int, 256), "probe processes, each with its own event loop; the schedule is split "
                      "between them and their records merged into one report", default=1, unit="process"),
    "tokenizer": Option(typed(str), "tokenizer.json of the served model (needs the tokenizers extra): exact tokens "
                        "per chunk when an OpenAI server reports only the final total",
                        unset="none: apportioned by text length"),
    "json": Option(typed(str), "write the results document (JSON) to this file", unset="not written"),
    "records": Option(typed(str), "write every request record to this file (JSON Lines; replay with specwatch report)",
                      unset="not written"),
    "hlog": Option(typed(str), "write an HdrHistogram interval log to this file", unset="not written"),
    # run
    "log_file": Option(typed(str), "the server's log file, for accept length and load (run follows it across rotation "
                                   "and truncation; sweep: a template, without it each launch's own output)"),
    "log_cmd": Option(typed(str), "read server logs from this command's stdout (restarted when it exits)"),
    "log_stdin": Option(typed(bool), "read server logs from stdin", default=False),
    "from_start": Option(typed(bool), "read --log-file from its start instead of its end", default=False),
    "listen": Option(listen, "HOST:PORT for the page, /metrics and the API", default=DEFAULT_LISTEN),
    "baseline_tps": Option(positive(float, 1e9), "plain decoding's decode tok/s per stream to compare against "
                                                "(valid at low load only: up to 2 running requests)"),
    "baseline_url": Option(url, "a non-speculative server probed A/B with the same prompts"),
    "baseline_curve": Option(typed(str), "plain decoding's tok/s by load (a JSON file sweep --concurrency writes): "
                                         "the verdict compares at the server's current load"),
    "advisor_prior": Option(typed(str), "sweep.json of this server (specwatch sweep): the live advisor's cost shape "
                                        "over step counts (without it the shape is a range); or a "
                                        "speculation_profile.json (advise --speculation-profile, Model-Optimizer): "
                                        "acceptance along the chain only"),
    "advisor_max_steps": Option(positive(int, 64), "the live advisor predicts step counts 0 to this",
                                default=10, unit="steps"),
    "load_curve_window_s": Option(positive(int, 30 * 86_400), "how far back the speedup-by-load curve reaches, "
                                                              "in seconds", default=21600, unit="s"),
    "pause_s": Option(at_least(float, 0, hi=DAY_S), "pause between a stream's probes in seconds", default=2.0,
                      unit="s"),
    "interval_s": Option(positive(float, 3600), "interval between window updates in seconds", default=10.0,
                         unit="s"),
    "verdict_window_s": Option(positive(int, 7 * 86_400), "window for tok/s, speedup and verdict, in seconds",
                               default=60, unit="s"),
    "windows_s": Option(window_list, "rolling windows in seconds, comma-separated", default=(60.0, 300.0),
                        unit="s"),
    "server_metrics": Option(typed(bool), "also scrape the server's own /metrics for accept length", default=False),
    "hysteresis": Option(ratio, "speedup must exceed 1 + this to clear the below-baseline state", default=0.03),
    "min_requests": Option(positive(int, 1_000_000), "requests in the verdict window before a verdict", default=3,
                           unit="requests"),
    "drain_timeout_s": Option(positive(float, DAY_S), "on SIGTERM, wait this long for probes in flight", default=30.0,
                              unit="s"),
    "view": Option(choice("auto", "table", "log"), "terminal table (auto when stdout is a TTY) or log lines",
                   default='auto'),
    "api_token": Option(secret, "require Authorization: Bearer <token> on / and /api/*", flag=False),
    "api_token_file": Option(typed(str), "require Authorization: Bearer <the token in this file> on / and /api/*",
                             unset="none: open"),
    # sweep
    "launch": Option(typed(str), "server command with {param} placeholders"),
    "param": Option(typed(str), "NAME=V1,V2,… or NAME=LOW..HIGH (sweep: several make a grid; tune: one, the step "
                                "count)", many=True, default=()),
    "baseline_launch": Option(typed(str), "the same server without speculation"),
    "targets": Option(typed(str), "URL,URL of servers already running (instead of --launch)",
                      unset="none: --launch"),
    "interleave": Option(positive(int, 10_000), "with --targets at one stream: split --num-runs into this many "
                                                "rounds, each benching every target in turn (the order rotated), "
                                                "and compare round by round", default=1, unit="round"),
    "ready_timeout_s": Option(positive(float, 7 * DAY_S), "wait this long for a launched server to become ready",
                              default=1800.0, unit="s"),
    "grace_s": Option(positive(float, DAY_S), "seconds between SIGTERM and SIGKILL when stopping a server",
                      default=20.0, unit="s"),
    "out": Option(typed(str), "output directory", default='sweep-out', by_command={"tune": "tune-out"}),
    "speculative_config": Option(json_object, "vLLM: the speculative server's own --speculative-config JSON (vLLM "
                                              "does not report it; sweep: with --targets, --launch commands are "
                                              "read), so the advice is printed as a whole flag"),
    # tune
    "start": Option(typed(str), "NAME=V: the configuration running today, tune's first launch",
                    unset="the middle of --param's range"),
    "max_launches": Option(positive(int, 1000), "at most this many speculative launches (the baseline apart)",
                           default=4, unit="launches"),
    "concurrency_levels": Option(int_list, "closed loop: streams in flight; a list (1,4,16,32) benches every "
                                           "configuration at each", flag_name="concurrency", default='1',
                                 unit="stream"),
}


def default(key: str, command: str = "") -> Any:
    """The default of option ``key`` (for ``command`` where it has its own)."""
    opt = OPTIONS[key]
    return opt.by_command.get(command, opt.default)


BOOL_KEYS = frozenset({"ignore_eos", "poisson", "log_stdin", "from_start", "server_metrics", "verbose"})


def as_written(value: Any) -> str:
    """A default as the user would write it: a tuple comma-separated, as its flag takes it."""
    return ",".join(f"{x:.15g}" for x in value) if isinstance(value, tuple) else str(value)


def flag(key: str) -> str:
    opt = OPTIONS.get(key)
    return "--" + (opt.flag_name if opt is not None and opt.flag_name else key).replace("_", "-")


def shown_default(key: str, default: Any) -> str:
    """How --help and the README state a default: with its unit, "(required)" for a required flag."""
    opt = OPTIONS[key]
    if default == "":
        return "(required)"
    if default is None or (opt.many and not default):
        return f"(default: {opt.unset})"
    if key in BOOL_KEYS:
        return f"(default: on; {flag('no_' + key)} to {opt.negation})" if default else "(default: off)"
    value = f"{default:g}" if isinstance(default, float) else as_written(default)
    return f"(default: {value}{' ' + opt.unit if opt.unit else ''})"


def add_flags(p: argparse.ArgumentParser, defaults: Mapping[str, Any]) -> None:
    """One flag per key of ``defaults`` (``None``: no default); help states the default and its unit."""
    for key, default in defaults.items():
        opt = OPTIONS[key]
        if not opt.flag:
            continue
        text = f"{opt.help} {shown_default(key, default)}".replace("%", "%%")
        if key in BOOL_KEYS and default is True:
            p.add_argument(flag(key), *opt.aliases, dest=key, action=argparse.BooleanOptionalAction, default=None,
                           help=text)
        elif key in BOOL_KEYS:
            p.add_argument(flag(key), *opt.aliases, dest=key, action="store_const", const=True, default=None,
                           help=text)
        elif opt.many:
            p.add_argument(flag(key), *opt.aliases, dest=key, action="append", default=None, help=text)
        else:
            p.add_argument(flag(key), *opt.aliases, dest=key, default=None, help=text)


def environment(defaults: Mapping[str, Any], config_file: bool = True) -> str:
    """The --help epilog: every environment variable the command reads, and the layering."""
    rows = [(ENV_PREFIX + "CONFIG", "the TOML config file, as --config")] if config_file else []
    for key in defaults:
        opt = OPTIONS[key]
        rows.append((ENV_PREFIX + key.upper(), flag(key) if opt.flag else
                     f"{opt.help} (no flag: a secret never goes on a command line)"))
    width = max(len(name) for name, _ in rows)
    order = "flags > SPECWATCH_* > config file > defaults" if config_file else "flags > SPECWATCH_* > defaults"
    return "\n".join([f"environment ({order}):", *(f"  {name:<{width}}  {what}" for name, what in rows)])


def validate(values: Mapping[str, Any], where: str, allowed: Iterable[str]) -> dict[str, Any]:
    """Check every value of one layer; an unknown key or a bad value names the key and ``where``."""
    allowed = tuple(allowed)
    out: dict[str, Any] = {}
    for key, raw in values.items():
        if key not in allowed:
            raise ConfigError(f"{where}: unknown option {key!r} (allowed: {', '.join(allowed)})")
        try:
            opt = OPTIONS[key]
            out[key] = [opt.check(key, r) for r in raw] if opt.many else opt.check(key, raw)
        except ConfigError as exc:
            raise type(exc)(f"{where}: {exc}") from None
    return out


def api_key(values: Mapping[str, Any]) -> str | None:
    """The API key from ``api_key`` or ``api_key_file`` (alternatives)."""
    if values.get("api_key") and values.get("api_key_file"):
        raise ConfigError("api_key and api_key_file are alternatives: give at most one")
    path = values.get("api_key_file")
    return read_secret_file("api_key_file", path) if path else values.get("api_key")


def key_source(api_key_file: str | None, api_key: str | None, env_name: str = "SPECWATCH_API_KEY") -> str:
    """What to say when the target refuses our credentials: where the key came from (never the key), or
    where to give one."""
    if api_key_file:
        return f"the target refuses the API key read from {api_key_file}"
    if api_key:
        return f"the target refuses the API key from {env_name}"
    return "it needs an API key: give it in SPECWATCH_API_KEY or --api-key-file"


def to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def foreign_variable(name: str) -> str:
    """The warning for a ``SPECWATCH_*`` variable that is no option of any command."""
    close = difflib.get_close_matches(name[len(ENV_PREFIX):].lower(), OPTIONS, n=1, cutoff=0.8)
    hint = f" (did you mean {ENV_PREFIX}{close[0].upper()}?)" if close else ""
    return f"specwatch: warning: ignoring {name}: no specwatch option is called that{hint}"


def layer(defaults: Mapping[str, Any], flags: Mapping[str, Any], environ: Mapping[str, str] | None,
          file: Mapping[str, Any] | None = None, file_name: str = "",
          warn: Callable[[str], None] = to_stderr) -> dict[str, Any]:
    """The one layering of every command: flags > environment (``SPECWATCH_*``) > config file > default. Each
    layer is validated against the command's options and an error names the layer and the key. A variable that
    is another command's option is left to it (one environment may serve the daemon and a bench job); one that
    is no option at all (a wrapper script's ``SPECWATCH_VENV``, a misspelt option) is not ours to refuse: it is
    named in a warning (``warn``, stderr) and ignored. A config file is ours: an unknown key in it is refused."""
    named = {k: v for k, v in (environ or {}).items() if k.startswith(ENV_PREFIX) and k != ENV_PREFIX + "CONFIG"}
    for name in sorted(k for k in named if k[len(ENV_PREFIX):].lower() not in OPTIONS):
        warn(foreign_variable(name))
    env = {k[len(ENV_PREFIX):].lower(): v for k, v in named.items() if k[len(ENV_PREFIX):].lower() in defaults}
    out = dict(defaults)
    if file:
        out |= validate(file, f"config file {file_name}", defaults)
    return out | validate(env, "environment (SPECWATCH_*)", defaults) | validate(flags, "command line", defaults)


def add_config_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", default=None,
                   help="TOML file with any of the options below, keyed by name (max_tokens = 500); or "
                        "SPECWATCH_CONFIG (default: none)")


def read_toml(path: str) -> dict[str, Any]:
    """A config file's keys; an unreadable or malformed file names itself."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from None


def from_flags(ns: argparse.Namespace, defaults: Mapping[str, Any],
               environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``layer`` for a command: the parsed flags over the environment over the config file (``--config``, else
    ``SPECWATCH_CONFIG``) over ``defaults``."""
    path = getattr(ns, "config", None) or (environ or {}).get(ENV_PREFIX + "CONFIG")
    flags = {k: v for k, v in vars(ns).items() if k in defaults and v is not None}
    return layer(defaults, flags, environ, read_toml(path) if path else None, path or "")


def require(values: Mapping[str, Any], keys: Iterable[str]) -> None:
    for key in keys:
        if values.get(key) in (None, "", []):
            raise ConfigError(f"{key} is required ({flag(key)})")
