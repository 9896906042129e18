"""A stand-in OpenAI-compatible endpoint -- NOT vLLM.

It exists for what a real server cannot be made to do on demand here: answer 200+ requests/s on a
2-core machine (to measure the probe client's own capacity), and misbehave in precise ways (stall
mid-stream, send malformed chunks, fail with 500, omit usage, refuse ``ignore_eos``) so that the
probe's handling of server faults is tested. Everything the probe measures for real runs against
the lab's real vLLM; the same client code path runs against both.

    python -m llmfleet.probe.standin --port 8399 [--fault stall] [--api-key-file F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web

FAULTS = ("none", "stall", "malformed", "http500", "no_usage", "reject_ignore_eos", "slow")


def make_app(model: str = "standin", max_model_len: int = 4096, fault: str = "none", api_key: str | None = None,
             token_delay_s: float = 0.001) -> web.Application:
    async def models(request: web.Request):
        if api_key and request.headers.get("Authorization") != f"Bearer {api_key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return web.json_response({"object": "list", "data": [
            {"id": model, "object": "model", "owned_by": "llmfleet-standin", "max_model_len": max_model_len}]})

    async def tokenize(request: web.Request):
        body = await request.json()
        return web.json_response({"count": len(body.get("prompt", "").split()), "max_model_len": max_model_len})

    async def completions(request: web.Request):
        if api_key and request.headers.get("Authorization") != f"Bearer {api_key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        body = await request.json()
        if body.get("model") != model:
            return web.json_response({"error": {"message": f"The model `{body.get('model')}` does not exist."}},
                                     status=404)
        if fault == "reject_ignore_eos" and "ignore_eos" in body:
            return web.json_response({"error": {"message": "unknown field ignore_eos"}}, status=400)
        if fault == "http500" and body.get("max_tokens", 1) > 2:  # the preflight's 2-token request passes
            return web.json_response({"error": {"message": "internal error"}}, status=500)
        n = int(body.get("max_tokens", 16))
        prompt_tokens = len(str(body.get("prompt", "")).split())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        created = int(time.time())
        for i in range(n):
            if token_delay_s:
                await asyncio.sleep(token_delay_s * (20 if fault == "slow" else 1))
            if fault == "stall" and i == 2 and n > 2:
                await asyncio.sleep(3600)
            if fault == "malformed" and i == 1 and n > 2:
                await resp.write(b"data: {not json\n\n")
                continue
            chunk = {"id": "cmpl-standin", "object": "text_completion", "created": created, "model": model,
                     "choices": [{"index": 0, "text": f" t{i}", "finish_reason": "length" if i == n - 1 else None}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if fault != "no_usage":
            usage = {"id": "cmpl-standin", "object": "text_completion", "created": created, "model": model,
                     "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                                              "total_tokens": prompt_tokens + n},
                     "system_fingerprint": "llmfleet-standin"}
            await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def health(request: web.Request):  # as vLLM's (GuideLLM checks it before a run)
        return web.Response(status=200)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/tokenize", tokenize)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8399)
    ap.add_argument("--model", default="standin")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--fault", choices=FAULTS, default="none")
    ap.add_argument("--api-key-file")
    ap.add_argument("--token-delay-ms", type=float, default=1.0)
    a = ap.parse_args()
    key = open(a.api_key_file).read().strip() if a.api_key_file else None
    try:  # the fast event loop where installed (as the probe's client): the stand-in must not be the limit
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = None
    web.run_app(make_app(a.model, a.max_model_len, a.fault, key, a.token_delay_ms / 1000), host=a.host, port=a.port,
                print=lambda *_: print(f"standin listening on {a.host}:{a.port} (fault: {a.fault})", flush=True),
                access_log=None, loop=loop)


if __name__ == "__main__":
    main()
