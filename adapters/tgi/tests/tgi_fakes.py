"""Shared by the TGI unit tests: the engine description a test pretends ``/info`` returned."""

from __future__ import annotations

from typing import Any

from unillm_tgi import TGIInfo


def tgi_info(
    *, version: str = "3.3.6-dev0", max_model_len: int = 4096, max_input_tokens: int = 4095, **more: Any
) -> TGIInfo:
    """A TGI serving the model "tiny" (``more``: further TGIInfo fields, e.g. ``max_best_of``)."""
    return TGIInfo(
        engine="tgi",
        model="tiny",
        version=version,
        max_model_len=max_model_len,
        model_id="tiny",
        max_input_tokens=max_input_tokens,
        **more,
    )
