"""mlx-lm inside the caller's process, answering the OpenAI-style API that MLXAdapter speaks.

    async with unillm.launch("mlx", model="/models/qwen-4bit", in_process=True) as llm:
        r = await llm.generate("Pick:", output=unillm.Choice(["red", "blue"]))

Everything MLX does runs on one worker thread (model loading, prefill, decoding), so the event
loop stays free; tokens reach the loop as they are generated. Requests run one at a time, in
arrival order. Importing this package is cheap: mlx, mlx-lm and llguidance load on the worker.

The modules, from the HTTP surface down:

* ``transport``: the httpx transport, routing each path to the engine;
* ``parsing``: request bodies checked and turned into a :class:`~.parsing.Job`;
* ``responses`` and ``answer``: worker events turned into OpenAI bodies and SSE chunks;
* ``engine``: the worker thread, its requests and counters; ``models``: the models it loads;
* ``channel``: events (``events``) from the worker thread to the event loop;
* ``generation``: one choice decoded, with ``sampling``, ``detokenize``, ``logprobs``, ``prompts``.
"""

from __future__ import annotations

from unillm_mlx.inprocess.transport import InProcessTransport

__all__ = ["InProcessTransport"]
