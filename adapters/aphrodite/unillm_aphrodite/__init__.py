"""Aphrodite Engine adapter for unillm (an OpenAI-compatible server): ``unillm.connect("aphrodite", url)``."""

from .adapter import AphroditeAdapter

__all__ = ["AphroditeAdapter"]
