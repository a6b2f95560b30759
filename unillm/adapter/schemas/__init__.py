"""What each constrained-decoding backend can honour in a JSON schema, known before sending.

    schema = portable_schema(schema)          # exact rewrites (merged allOf, declared required)
    schema = xgrammar_strings(schema)         # xgrammar: length-bounded strings as patterns
    problem = xgrammar_problem(schema)        # or guidance_problem(schema, compact=True)
    if problem:
        raise schema_refusal("vllm", "xgrammar", problem, alternative="...")

Pure translation, shared by the adapters whose engines use these backends (vLLM, SGLang, MLX in
process). See docs/guide/structured-output.md for the matrix measured on JSONSchemaBench.
"""

from __future__ import annotations

from unillm.adapter.schemas.guidance import closed_schema, guidance_available, guidance_problem
from unillm.adapter.schemas.rewrite import portable_schema
from unillm.adapter.schemas.strings import xgrammar_strings
from unillm.adapter.schemas.walk import SchemaProblem, largest_count
from unillm.adapter.schemas.xgrammar import (
    XGRAMMAR_FORMATS,
    vllm_refusal,
    xgrammar_miscompile,
    xgrammar_problem,
)
from unillm.errors import UnsupportedFeature

__all__ = [
    "XGRAMMAR_FORMATS",
    "SchemaProblem",
    "closed_schema",
    "guidance_available",
    "guidance_problem",
    "largest_count",
    "portable_schema",
    "schema_refusal",
    "vllm_refusal",
    "xgrammar_miscompile",
    "xgrammar_problem",
    "xgrammar_strings",
]


def schema_refusal(
    engine: str, backend: str, problem: SchemaProblem, *, alternative: str, version: str | None = None
) -> UnsupportedFeature:
    """The typed refusal for a schema ``backend`` cannot honour on ``engine``.

    Args:
        engine: The engine's name (e.g. "vllm").
        backend: The server's constrained-decoding backend (e.g. "xgrammar").
        problem: What the backend's rules found, and where.
        alternative: What the caller can do instead (another backend, engine, or validating).
        version: The engine's version, when known.

    Returns:
        An UnsupportedFeature naming the keyword, its JSON pointer, the backend and the way out.
    """
    where = problem.pointer or "/"
    return UnsupportedFeature(
        engine,
        f"JSON schema keyword {problem.keyword!r} at {where}",
        version=version,
        why=f"its constrained-decoding backend is {backend}, and {problem.why}",
        alternative=alternative,
    )
