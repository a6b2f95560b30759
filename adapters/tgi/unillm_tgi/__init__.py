"""Hugging Face TGI adapter for unillm: unified requests to TGI, and TGI launch commands.

    llm = unillm.connect("tgi", "http://127.0.0.1:8080")
    r = await llm.generate("Date?", output=unillm.Regex(r"\\d{4}-\\d{2}-\\d{2}"), max_tokens=12)

Prompts go to TGI's native ``/generate`` (or ``/generate_stream``), chat messages to
``/v1/chat/completions``; see :class:`TGIAdapter` for what is mapped, derived or refused, and
``unillm engines`` for the capability table.
"""

from unillm_tgi.adapter import TGIAdapter
from unillm_tgi.launch import Runtime, detect_runtime
from unillm_tgi.requests import TGIInfo

__all__ = ["Runtime", "TGIAdapter", "TGIInfo", "detect_runtime"]
