"""Talking to one engine: the ``Client`` protocol, ``LLM``, ``Stream``, transport, deadlines,
the blocking twin."""
