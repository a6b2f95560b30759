"""Ollama adapter for unillm: unified requests to Ollama's native API, and ``ollama serve`` launches.

    llm = unillm.connect("ollama", "http://127.0.0.1:11434", model="llama3.2:1b")
    async with unillm.launch("ollama", model="llama3.2:1b") as llm: ...   # pulls the model first

Prompts go to ``/api/generate`` (raw: the prompt is continued as is), chat messages to
``/api/chat``, embeddings to ``/api/embed``; streams are Ollama's NDJSON. See
:class:`OllamaAdapter` for what is mapped or refused, and ``unillm engines`` for the table.
"""

from unillm_ollama.adapter import OllamaAdapter

__all__ = ["OllamaAdapter"]
