"""The server program ``unillm.launch("llamacpp", ...)`` runs: llama-cpp-python's own server app.

It runs in the engine's env as ``python -c SERVER_MAIN '<json settings>'``: the JSON holds
llama-cpp-python's server settings and one model entry per served name (the base model, and
the base model with each LoRA under the LoRA's name), as its ``--config_file`` would. Two
things differ from ``python -m llama_cpp.server``:

* a request whose GBNF ``grammar`` llama.cpp cannot parse is answered 400 before it reaches
  the sampler (llama.cpp returns no sampler for it and the server process crashes);
* the API key comes from the environment (``UNILLM_LLAMACPP_API_KEY``), not from argv.
"""

from __future__ import annotations

__all__ = ["API_KEY_ENV", "SERVER_MAIN"]

API_KEY_ENV = "UNILLM_LLAMACPP_API_KEY"

SERVER_MAIN = """\
import json, os, sys
import llama_cpp, uvicorn
from llama_cpp.server.app import create_app
from llama_cpp.server.settings import ModelSettings, ServerSettings

config = json.loads(sys.argv[1])
models = [ModelSettings(**m) for m in config.pop("models")]
server = ServerSettings(**config, api_key=os.environ.get("UNILLM_LLAMACPP_API_KEY") or None)


def grammar_error(body):
    try:
        data = json.loads(body)
    except ValueError:
        return None
    grammar = data.get("grammar") if isinstance(data, dict) else None
    if not isinstance(grammar, str) or not grammar:
        return None
    sampler = llama_cpp.llama_sampler_init_grammar(None, grammar.encode(), b"root")
    if not sampler:
        return "invalid GBNF grammar: llama.cpp could not parse it (see the server log)"
    llama_cpp.llama_sampler_free(sampler)
    return None


class GrammarGuard:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        error = grammar_error(body)
        if error is not None:
            payload = json.dumps({"error": {"message": error, "type": "invalid_request_error",
                                            "param": "grammar", "code": None}}).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": payload})
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


app = create_app(server_settings=server, model_settings=models)
uvicorn.run(GrammarGuard(app), host=server.host, port=server.port)
"""
assert API_KEY_ENV in SERVER_MAIN
