"""A deliberately broken SGLang look-alike for the client's failure tests: a real HTTP server whose n-th
/generate request gets the n-th fault of FAULTS (cycling). Faults that the simulator would never produce."""

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
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
