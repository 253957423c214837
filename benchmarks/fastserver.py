"""A local SSE server that streams SGLang-shaped /generate events as fast as it can (no model timing).

Run as a separate process so its CPU is not counted against the client: ``python fastserver.py PORT``.
Request body ``sampling_params.max_new_tokens`` sets the tokens; 2 tokens per chunk (a verify round)."""

import sys

import orjson
from aiohttp import web

WORD = " tok"


def events(n_tokens: int) -> list[bytes]:
    out, ct = [], 0
    while ct < n_tokens:
        ct = min(n_tokens, ct + (1 if ct == 0 else 2))
        final = ct == n_tokens
        meta = {"id": "r", "finish_reason": {"type": "length", "length": ct} if final else None,
                "prompt_tokens": 8, "completion_tokens": ct, "cached_tokens": 0}
        if final:
            meta |= {"spec_verify_ct": (ct - 1 + 1) // 2, "spec_accept_length": 2.0}
        out.append(b"data: " + orjson.dumps({"text": WORD * ct, "meta_info": meta}) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


CACHE: dict[int, list[bytes]] = {}


async def generate(request: web.Request) -> web.StreamResponse:
    body = orjson.loads(await request.read())
    n = int(body.get("sampling_params", {}).get("max_new_tokens", 16))
    evs = CACHE.get(n) or CACHE.setdefault(n, events(n))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for e in evs:
        await resp.write(e)
    return resp


async def info(_: web.Request) -> web.Response:
    return web.json_response({"speculative_algorithm": "EAGLE3", "version": "fast"})


def main() -> None:
    app = web.Application()
    app.router.add_post("/generate", generate)
    app.router.add_get("/get_server_info", info)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=lambda *_: print("ready", flush=True),
                access_log=None)


if __name__ == "__main__":
    main()
