"""A deliberately broken SGLang look-alike for the client's failure tests: a real HTTP server whose n-th
/generate request gets the n-th fault of FAULTS (cycling). With ``hostile`` as second argument it is a hostile
OpenAI-compatible server instead: a /v1/models list holding a non-object, completion chunks whose text is a
number, a /metrics exposition with +Inf values and 2,000 dp_rank labels, and a redirect to another server.
Faults that neither the simulator nor a sane server would produce."""

import asyncio
import sys

import orjson
from aiohttp import web

FAULTS = ["ok", "http500", "http429", "http503", "malformed", "cut", "no_done", "stall", "error_event", "ok"]


def chunk(ct: int, final: bool = False) -> bytes:
    meta = {"id": "r", "finish_reason": {"type": "length", "length": ct} if final else None, "prompt_tokens": 3,
            "completion_tokens": ct, "cached_tokens": 0}
    if final:
        meta["spec_verify_ct"] = 2
    return b"data: " + orjson.dumps({"text": "w " * ct, "meta_info": meta}) + b"\n\n"


async def serve(app: web.Application, port: int) -> None:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


async def main(port: int) -> None:
    n = 0

    async def info(_: web.Request) -> web.Response:
        return web.json_response({"speculative_algorithm": "EAGLE3", "version": "fault"})

    async def generate(request: web.Request) -> web.StreamResponse:
        nonlocal n
        fault = FAULTS[n % len(FAULTS)]
        n += 1
        if fault.startswith("http"):
            return web.Response(status=int(fault[4:]), text=f"fault {fault}")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk(1))
        await asyncio.sleep(0.01)
        if fault == "malformed":
            await resp.write(b'data: {"text": "trunc\n\n')
        elif fault == "cut":
            await resp.write(chunk(3))
            request.transport.close()  # connection dropped mid-stream
            return resp
        elif fault == "stall":
            await asyncio.sleep(30)
        elif fault == "error_event":
            await resp.write(b'data: {"error": {"message": "CUDA out of memory"}}\n\n')
        await resp.write(chunk(5, final=True))
        if fault != "no_done":
            await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/get_server_info", info)
    app.router.add_post("/generate", generate)
    await serve(app, port)


async def hostile(port: int) -> None:
    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [7, "x"]})

    async def completions(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"index": 0, "text": 12345}], "usage": null}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def metrics(_: web.Request) -> web.Response:
        lines = ["sglang:num_running_reqs{dp_rank=\"0\"} +Inf", "sglang:spec_accept_length{dp_rank=\"0\"} NaN",
                 "sglang:gen_throughput{dp_rank=\"0\"} 1e308"]
        lines += [f"sglang:spec_accept_length{{dp_rank=\"{i}\"}} 2.5" for i in range(2000)]
        return web.Response(text="\n".join(lines) + "\n")

    async def moved(_: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("http://127.0.0.1:9/v1/completions")

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", moved)
    app.router.add_get("/metrics", metrics)
    await serve(app, port)


if __name__ == "__main__":
    asyncio.run(hostile(int(sys.argv[1])) if sys.argv[2:] == ["hostile"] else main(int(sys.argv[1])))
