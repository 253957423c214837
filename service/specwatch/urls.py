"""Validation of server base URLs given on the command line or in config. Pure."""

from __future__ import annotations

from urllib.parse import urlsplit


class UrlError(ValueError):
    pass


def parse_base_url(url: str) -> str:
    """Return ``scheme://host[:port]`` (no trailing slash) or raise ``UrlError`` saying what is wrong."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UrlError(f"{url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise UrlError(f"{url!r} must start with http:// or https://")
    if not parts.hostname:
        raise UrlError(f"{url!r} has no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise UrlError(f"{url!r} must be a base URL without a path (e.g. http://127.0.0.1:30000)")
    netloc = parts.hostname if port is None else f"{parts.hostname}:{port}"
    if ":" in (parts.hostname or "") and not netloc.startswith("["):
        netloc = f"[{parts.hostname}]" + ("" if port is None else f":{port}")
    return f"{parts.scheme}://{netloc}"
