"""Secrets unillm never prints, and API keys that cannot be sent.

display_url("http://user:pw@gpu-1:8000")   # 'http://user:***@gpu-1:8000'
is_secret_name("HF_TOKEN")                 # True: its value is masked wherever unillm prints it
check_api_key("sk-...\\n")                  # InvalidOptions (the key itself is not echoed)

A name is secret when one of its ``_``-separated words is in :data:`SECRET_WORDS` (any case):
``HF_TOKEN``, ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD`` and
``GOOGLE_APPLICATION_CREDENTIALS`` are; ``TOKENIZERS_PARALLELISM`` and ``VLLM_CPU_KVCACHE_SPACE``
are not. Mark more names with the ``secret_env=[...]`` launch setting.
"""

from __future__ import annotations

import re

from unillm.errors import InvalidOptions

MASK = "***"

#: Words that make an environment variable's name secret (matched whole, case-insensitively).
SECRET_WORDS = frozenset(
    {
        "TOKEN",
        "TOKENS",
        "KEY",
        "KEYS",
        "APIKEY",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "COOKIE",
    }
)

# scheme://user:password@ -> keep the user, mask the password (also in a URL that does not parse)
_USERINFO = re.compile(r"(?P<head>^[A-Za-z][A-Za-z0-9+.-]*://[^/@:?#]*):[^/?#]*@")


def display_url(url: str) -> str:
    """``url`` as unillm prints it (repr, errors, spans, logs): a password in it becomes ``***``."""
    return _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", url)


def is_secret_name(name: str) -> bool:
    """True when an environment variable's name says its value is a secret (see module docs)."""
    return any(word in SECRET_WORDS for word in name.upper().split("_"))


def check_api_key(key: object, what: str = "api_key") -> None:
    """Refuse an API key that cannot go in an HTTP header, without echoing it ("" and None: no key).

    Raises:
        InvalidOptions: ``key`` is not a string, or holds a control character
            (e.g. the newline at the end of a file it was read from), a space or non-ASCII.
    """
    if key is None:
        return
    if not isinstance(key, str):
        raise InvalidOptions(f"{what} must be a string (or None for no key), got {type(key).__name__}")
    for i, c in enumerate(key):
        if not "!" <= c <= "~":  # visible ASCII only: what every engine's header check accepts
            kind = (
                "a control character"
                if ord(c) < 32 or ord(c) == 127
                else "a space"
                if c == " "
                else "a non-ASCII character"
            )
            hint = " (a trailing newline read from a file? strip it: key.strip())" if c in "\r\n" else ""
            raise InvalidOptions(
                f"{what} holds {kind} (U+{ord(c):04X}) at position {i} of {len(key)}{hint}; "
                "an API key is visible ASCII only. Nothing was sent"
            )
