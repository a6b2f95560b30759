"""Where a semantic router gets its embeddings: a unillm engine, or a remote endpoint.

    EngineEmbedder(unillm.connect("vllm", "http://127.0.0.1:8001"))    # e.g. MiniLM, pooling runner
    OpenAIEmbedder("https://api.example.com/v1", model="text-embedding-3-small", api_key="...")
    OpenAIEmbedder.azure("https://res.openai.azure.com", deployment="emb", api_version="2024-10-21",
                         api_key="...")                                   # api-key header

An embedder has a ``key`` (which model, where) so route embeddings are computed once per
embedder and model, and ``embed(texts)`` returning one vector per text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import httpx

from unillm.errors import EngineUnavailable, MalformedResponse, UnillmError


class EmbeddingError(UnillmError):
    """The embedder failed or answered vectors the router cannot use."""


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into vectors for a semantic router."""

    @property
    def key(self) -> str:
        """Identifies the model and endpoint (route embeddings are cached under it)."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order.

        Args:
            texts: The texts to embed.

        Returns:
            One vector per text, in order.
        """

    async def aclose(self) -> None:
        """Release connections."""


class EngineEmbedder:
    """Embeddings from any unillm engine that serves them (``llm.embed``).

    Args:
        llm: A unillm client (LLM or Fleet) serving an embedding model; the embedder owns it.
    """

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    @property
    def key(self) -> str:
        return repr(self.llm)  # engine, URL and model

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, from ``llm.embed``.

        Args:
            texts: The texts to embed.
        """
        result = await self.llm.embed(list(texts))
        return [list(v) for v in getattr(result, "vectors", result)]

    async def aclose(self) -> None:
        await self.llm.aclose()


class OpenAIEmbedder:
    """A remote OpenAI-compatible ``/v1/embeddings`` endpoint, Azure OpenAI / AI Foundry included.

    ``auth="bearer"`` sends ``Authorization: Bearer <key>``; ``auth="api-key"`` sends Azure's
    ``api-key`` header. ``api_version`` is added as the ``api-version`` query parameter.
    ``dimensions`` asks models that support it for shorter vectors.

    Args:
        base_url: The endpoint's root URL (http or https; a trailing ``/v1`` is merged with ``path``).
        model: The ``model`` field to send; None sends none (e.g. Azure deployments).
        api_key: The key, sent as ``auth`` says; never echoed.
        auth: "bearer" (``Authorization: Bearer``) or "api-key" (Azure's header).
        api_version: The ``api-version`` query parameter; None: none.
        dimensions: Ask for shorter vectors; None is the model's size.
        path: The embeddings path under ``base_url``.
        timeout: Seconds each step of a request may take (connect, read, write, pool).
        batch_size: Texts per request.
        headers: Extra headers sent with every request.
        http_transport: An httpx transport to send through instead of the network (tests).

    Raises:
        EmbeddingError: A URL that is not http(s), or a batch size or dimensions below 1.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        auth: Literal["bearer", "api-key"] = "bearer",
        api_version: str | None = None,
        dimensions: int | None = None,
        path: str = "/v1/embeddings",
        timeout: float = 30.0,
        batch_size: int = 64,
        headers: Mapping[str, str] | None = None,
        http_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise EmbeddingError(f"embedder base_url must start with http:// or https://, got {base_url!r}")
        if batch_size < 1 or (dimensions is not None and dimensions < 1):
            raise EmbeddingError("batch_size and dimensions must be positive")
        root = base_url.rstrip("/")
        if path.startswith("/v1/") and root.endswith("/v1"):
            root = root[: -len("/v1")]
        self.url, self.model, self.dimensions, self.batch_size = root + path, model, dimensions, batch_size
        sent = dict(headers or {})
        if api_key:
            sent["api-key" if auth == "api-key" else "Authorization"] = (
                api_key if auth == "api-key" else f"Bearer {api_key}"
            )
        params = {"api-version": api_version} if api_version else None
        self._client = httpx.AsyncClient(
            headers=sent, params=params, timeout=timeout, transport=http_transport
        )

    @classmethod
    def azure(
        cls,
        endpoint: str,
        *,
        deployment: str,
        api_version: str,
        api_key: str | None = None,
        auth: Literal["bearer", "api-key"] = "api-key",
        dimensions: int | None = None,
        **kwargs: Any,
    ) -> OpenAIEmbedder:
        """Azure OpenAI: ``{endpoint}/openai/deployments/{deployment}/embeddings?api-version=...``.

        With Microsoft Entra ID pass the token as ``api_key`` and ``auth="bearer"``.

        Args:
            endpoint: The Azure resource's URL (``https://<name>.openai.azure.com``).
            deployment: The embedding model's deployment name.
            api_version: The Azure API version (e.g. "2024-10-21").
            api_key: The resource key, or an Entra ID token with ``auth="bearer"``.
            auth: "api-key" (Azure's header) or "bearer".
            dimensions: Ask for shorter vectors; None is the model's size.
            **kwargs: Other :class:`OpenAIEmbedder` settings (timeout, batch_size, headers, ...).
        """
        return cls(
            endpoint,
            model=None,
            api_key=api_key,
            auth=auth,
            api_version=api_version,
            dimensions=dimensions,
            path=f"/openai/deployments/{deployment}/embeddings",
            **kwargs,
        )

    @property
    def key(self) -> str:
        return f"openai:{self.url}:{self.model}:{self.dimensions}"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, in batches of ``batch_size``.

        Args:
            texts: The texts to embed.

        Raises:
            EngineError: The endpoint refused or could not be reached (MalformedResponse: odd body).
        """
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors += await self._batch(list(texts[start : start + self.batch_size]))
        return vectors

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        from unillm.adapter.http_errors import error_for_status, error_message

        body: dict[str, Any] = {"input": texts}
        if self.model:
            body["model"] = self.model
        if self.dimensions:
            body["dimensions"] = self.dimensions
        try:
            response = await self._client.post(self.url, json=body)
        except httpx.HTTPError as e:
            raise EngineUnavailable(f"embedder at {self.url} could not be reached: {e!r}") from e
        if response.status_code >= 400:
            raise error_for_status("embedder", response.status_code, error_message(response.content), None)
        try:
            data = sorted(response.json()["data"], key=lambda d: d.get("index", 0))
            vectors = [[float(x) for x in d["embedding"]] for d in data]
        except (ValueError, KeyError, TypeError) as e:
            raise MalformedResponse(f"embedder at {self.url} answered an unexpected body ({e!r})") from None
        if len(vectors) != len(texts):
            raise MalformedResponse(
                f"embedder at {self.url} returned {len(vectors)} vectors for {len(texts)} texts"
            )
        return vectors

    async def aclose(self) -> None:
        await self._client.aclose()
