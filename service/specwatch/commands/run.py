"""``specwatch run``: the sidecar daemon (``specwatch.daemon``): options in, an exit status out."""

from __future__ import annotations

import argparse
import logging
import sys

from .. import config as config_mod
from .. import options
from ..daemon import Daemon, log, serve
from ..errors import AuthError, ConfigError
from ..probe import prompts as prompt_sets

DESCRIPTION = """\
The sidecar daemon: probes the server gently and continuously, follows its log (or scrapes its /metrics),
exports Prometheus metrics at /metrics, a page at / and /api/summary, and says whether speculative decoding
beats plain decoding at the load the server is under."""


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="specwatch run", description=DESCRIPTION, epilog=options.environment(
        config_mod.DEFAULTS), formatter_class=argparse.RawDescriptionHelpFormatter)
    config_mod.add_run_flags(p)
    args = p.parse_args(argv)
    try:
        cfg = config_mod.read(args)
        if cfg.prompts:
            prompt_sets.read(cfg.prompts)
        daemon = Daemon(cfg)  # loads the baseline curve and the tokenizer: a wrong one is refused here, named
    except ConfigError as exc:
        print(f"specwatch run: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. the --hlog file cannot be opened
        print(f"specwatch run: {exc}", file=sys.stderr)
        return 1
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)s")
    import uvloop

    try:
        return int(uvloop.run(serve(daemon)))
    except OSError as exc:
        print(f"specwatch run: {exc}", file=sys.stderr)
        return 1
    except ExceptionGroup as eg:
        auth = eg.subgroup(AuthError)
        if auth is not None:
            source = options.key_source(cfg.api_key_file, cfg.api_key, "SPECWATCH_API_KEY or the config's api_key")
            print(f"specwatch run: {auth.exceptions[0]}: {source}", file=sys.stderr)
            return 2
        for failure in eg.exceptions:
            log.error("a long-lived task failed: %r", failure, exc_info=failure)
        return 1
