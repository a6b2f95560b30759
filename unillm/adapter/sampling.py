"""The sampling fields beyond OpenAI's that most engines accept, sent only when asked for."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from unillm.options import Request

#: Sampling options beyond the OpenAI API that vLLM, SGLang and mlx-lm read under these names.
EXTRA_SAMPLING = ("top_k", "min_p", "repetition_penalty")


def sampling_fields(request: Request, names: Iterable[str] = EXTRA_SAMPLING) -> dict[str, Any]:
    """The request's values of the sampling options ``names`` that it sets, under the same names.

    Args:
        request: The validated request.
        names: The sampling options to copy (their body field names are the same).
    """
    return {name: value for name in names if (value := getattr(request, name)) is not None}
