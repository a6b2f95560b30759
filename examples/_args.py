"""The command line every example shares: where the engine is."""

from __future__ import annotations

import argparse


def engine_args(doc: str | None, *urls: str) -> argparse.Namespace:
    """``--engine`` and ``--url`` (repeatable for a fleet), with the example's docstring as help."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--engine", default="vllm", help="the engine's adapter (default vllm)")
    parser.add_argument("--url", action="append", help=f"the engine's address (default {', '.join(urls)})")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--embed", action="store_true", help="(embeddings example) also embed")
    args = parser.parse_args()
    args.url = args.url or list(urls)
    return args
