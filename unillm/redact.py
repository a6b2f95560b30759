"""Secrets unillm never prints, and API keys that cannot be sent.

display_url("http://user:pw@gpu-1:8000")   # 'http://user:***@gpu-1:8000'
is_secret_name("HF_TOKEN")                 # True: its value is masked wherever unillm prints it
masked_argv(["--api-key=sk-1", "--seed", "7"])   # ['--api-key=***', '--seed', '7']
check_api_key("sk-...\\n")                  # InvalidOptions (the key itself is not echoed)

A name is secret when one of its ``_``-separated words is in :data:`SECRET_WORDS` (any case):
``HF_TOKEN``, ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD`` and
``GOOGLE_APPLICATION_CREDENTIALS`` are; ``TOKENIZERS_PARALLELISM`` and ``VLLM_CPU_KVCACHE_SPACE``
are not. Mark more names with the ``secret_env=[...]`` launch setting.

A command-line flag is secret when its last word is (``--api-key``, ``--hf-token``,
``--admin-api-key``, ``--ssl-keyfile-password``), plural counts aside: ``--max-num-batched-tokens``,
``--api-key-file`` (a path) and ``--tokenizer`` are not. Its value is the ``=`` part
(``--api-key=KEY``) or the words after it up to the next flag (``--api-key KEY``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

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

#: Words that make a command-line flag secret when it ends with one (counts like ``--max-tokens`` do not).
SECRET_FLAG_WORDS = SECRET_WORDS - {"TOKENS", "KEYS"}

# scheme://user:password@ -> keep the user, mask the password (also in a URL that does not parse)
_USERINFO = re.compile(r"(?P<head>^[A-Za-z][A-Za-z0-9+.-]*://[^/@:?#]*):[^/?#]*@")


def display_url(url: str) -> str:
    """``url`` as unillm prints it (repr, errors, spans, logs): a password in it becomes ``***``."""
    return _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", url)


def is_secret_name(name: str) -> bool:
    """True when an environment variable's name says its value is a secret (see module docs)."""
    return any(word in SECRET_WORDS for word in name.upper().split("_"))


def is_secret_flag(flag: str) -> bool:
    """True when a command-line flag (``--api-key``, ``--hf-token=...``) carries a secret (module docs)."""
    if not flag.startswith("-"):
        return False
    name = flag.lstrip("-").partition("=")[0]
    return re.split(r"[-_.]", name)[-1].upper() in SECRET_FLAG_WORDS


def secret_flag_values(argv: Sequence[str]) -> list[tuple[str, str]]:
    """The secret flags in ``argv`` with their values, in order: ``[("--api-key", "sk-1"), ...]``.

    Args:
        argv: A command line, split (``["vllm", "serve", "m", "--api-key", "sk-1"]``).

    Returns:
        Each (flag, value) pair; a flag given with several values comes once per value, and a
        bare flag (``--hf-token`` followed by another flag) not at all.
    """
    return [(flag, value) for _, flag, value in _secret_values(argv)]


def masked_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with every secret flag's value as ``***`` (``--api-key ***``, ``--api-key=***``).

    Args:
        argv: A command line, split.

    Returns:
        A copy with the values masked; the other words as they were.
    """
    out = list(argv)
    for i, flag, _ in _secret_values(argv):
        out[i] = f"{flag}={MASK}" if argv[i].startswith(f"{flag}=") else MASK
    return out


def _secret_values(argv: Sequence[str]) -> Iterator[tuple[int, str, str]]:
    """(index, flag, value) of each secret value: ``--flag=value``, or the words after ``--flag``."""
    flag: str | None = None
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            if flag is not None:
                yield i, flag, arg
            continue
        name, eq, value = arg.partition("=")
        secret = is_secret_flag(name)
        flag = name if secret and not eq else None
        if secret and eq:
            yield i, name, value


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
