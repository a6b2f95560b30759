"""vLLM's engine without its HTTP server: ``unillm.launch("vllm", ..., in_process=True)``.

    async with unillm.launch("vllm", model="/models/tiny", in_process=True, cpu=True) as llm:
        r = await llm.generate("Hi", max_tokens=8)
    $ unillm batch in.jsonl --out out.jsonl --engine vllm --model /models/tiny --in-process

vLLM lives in its own env, so "in process" means in vLLM's interpreter: a worker process
(``worker``, stdlib and vLLM only) drives ``LLMEngine`` and speaks line-delimited JSON with
this process, where the httpx ``transport`` answers the adapter's usual routes from it. The
translation both ways is pure (``translate``: OpenAI body -> SamplingParams fields, result ->
OpenAI body); ``settings`` turns launch settings into engine flags and refuses what the
worker cannot honour.
"""
