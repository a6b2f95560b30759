"""The batch output file as a journal: durable appends, the resume scan, the torn-line repair.

Durability policy (group commit): finished results are appended as whole lines, the lines
waiting at that moment in one ``write`` on an ``O_APPEND`` descriptor, then ``fsync``; only
after the ``fsync`` returns does any of them count as done (progress, summary, the concurrency
slot it held). A crash therefore loses at most the results not yet fsynced, never a result
that was reported done, and can leave at most one torn last line (no newline, or not JSON),
which the next run's scan cuts off and redoes. The file is created with its directory fsynced,
and held under an exclusive ``flock`` so two runs never write one output.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unillm.batch.lines import shown
from unillm.batch.render import failed
from unillm.errors import InvalidOptions, UnillmError

_WRONG_FILE = "is --out the right file? Results go to a new file or one an earlier run wrote"
#: How every line this module writes starts (render's layout): a torn first line starts so too.
_OURS = b'{"id":"batch_req_'


class OutputWriteError(UnillmError):
    """The batch output could not be written (a full disk, an I/O error). Every result already in
    it is whole; rerun the same command once there is room, and it resumes."""


@dataclass
class Resume:
    """What an existing output already holds: ids done (with or without success), a torn tail."""

    succeeded: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    torn_bytes: int = 0  # bytes of a torn last line that were cut off

    @property
    def done(self) -> set[str]:
        """Every id with a result line, success or failure."""
        return self.succeeded | self.failed


class Journal:
    """An output file opened for appending under an exclusive lock: ``with Journal(path) as j:``.

    Args:
        path: The output JSONL file (created if absent).

    Raises:
        InvalidOptions: Another process holds the file (a second run on the same output), or
            it cannot be opened.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd = self._open()

    def _open(self) -> int:
        existed = self.path.exists()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise InvalidOptions(f"cannot open the output {self.path}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise InvalidOptions(
                f"another unillm batch is writing {self.path}; wait for it or pick another --out"
            ) from None
        if not existed:
            _fsync_dir(self.path.parent)
        return fd

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the lock and close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def scan(self, ids: Collection[str]) -> Resume:
        """Read what the output holds; then cut off (and fsync away) a torn last line.

        The file is checked whole before anything is cut: a torn last line is repaired only in
        a file known to be a results file (every other line a result of this batch), so a file
        that is not one is refused with every byte as it was.

        Args:
            ids: The input's custom_ids; a line for any other id means a different batch's output.

        Returns:
            The ids already done, split into succeeded and failed.

        Raises:
            InvalidOptions: A line that is not a result (not the last one), an id the input
                does not have, or an id written twice.
        """
        data = self.path.read_bytes()
        whole = data.rfind(b"\n") + 1
        lines = data[:whole].split(b"\n")[:-1]
        torn = data[whole:]
        parsed: list[dict[str, Any] | None] = [_result(line) for line in lines]
        if parsed and parsed[-1] is None:  # written whole but unreadable: torn by the file system
            whole -= len(lines[-1]) + 1
            torn = lines.pop() + b"\n" + torn
            parsed.pop()
        resume = Resume(torn_bytes=len(torn))
        for number, line in enumerate(parsed, start=1):
            if line is None:
                raise InvalidOptions(f"{self.path} line {number} is not a batch result; {_WRONG_FILE}")
            custom_id = line["custom_id"]
            if custom_id not in ids:
                raise InvalidOptions(
                    f"{self.path} holds a result for custom_id {shown(custom_id)}, which the input does "
                    "not have: it is another batch's output. Pick another --out"
                )
            if custom_id in resume.succeeded or custom_id in resume.failed:
                raise InvalidOptions(f"{self.path} holds custom_id {shown(custom_id)} twice (line {number})")
            (resume.failed if failed(line) else resume.succeeded).add(custom_id)
        if torn and not parsed and not _OURS.startswith(torn[: len(_OURS)]):
            raise InvalidOptions(
                f"{self.path} holds no batch result, only an incomplete line that is not one; {_WRONG_FILE}"
            )
        if torn:  # known now to be a results file: cut the torn line off
            os.ftruncate(self._fd, whole)
            os.fsync(self._fd)
        return resume

    def drop(self, ids: Collection[str]) -> int:
        """Remove the lines of ``ids`` (to redo failed requests), atomically: a new file replaces it.

        Returns:
            How many lines were removed.

        Raises:
            OutputWriteError: The new file could not be written; the output is as it was.
        """
        kept: list[bytes] = []
        removed = 0
        for line in self.path.read_bytes().splitlines(keepends=True):
            result = _result(line.rstrip(b"\n"))
            if result is not None and result["custom_id"] in ids:
                removed += 1
            else:
                kept.append(line)
        if not removed:
            return 0
        tmp = self.path.with_name(self.path.name + ".compact")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, b"".join(kept))
            finally:
                os.close(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _unwritable(self.path, e, "The output is as it was") from None
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        self.close()  # the lock was on the replaced file: take it on the new one
        self._fd = self._open()
        return removed

    def append(self, lines: list[bytes]) -> None:
        """Append whole lines in one write and fsync before returning (the group commit).

        Raises:
            OutputWriteError: The write or the fsync failed (a full disk, an I/O error); the
                lines of this group were taken back, the ones before stay whole.
        """
        size = os.fstat(self._fd).st_size
        try:
            _write_all(self._fd, b"".join(lines))
        except OSError as e:
            with contextlib.suppress(OSError):  # leave whole lines only; a rerun redoes this group
                os.ftruncate(self._fd, size)
                os.fsync(self._fd)
            raise _unwritable(self.path, e, "The results written before are whole") from None


def _unwritable(path: Path, error: OSError, state: str) -> OutputWriteError:
    return OutputWriteError(
        f"cannot write the output {path}: {error.strerror or error}. {state}: make room (or fix "
        "the disk) and rerun the same command to resume"
    )


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` at the end of ``fd`` (O_APPEND), then fsync it."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    os.fsync(fd)


def _result(line: bytes) -> dict[str, Any] | None:
    """A batch output line (ours, OpenAI's or vllm run-batch's), or None for anything else.

    Such a line has a string ``custom_id`` and a ``response`` (an object or null) or an
    ``error``; a batch *input* line (``custom_id``, ``url``, ``body``) is not one.
    """
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("custom_id"), str):
        return None
    response = value.get("response")
    if ("response" not in value and "error" not in value) or not isinstance(response, (dict, type(None))):
        return None
    return value


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems cannot fsync a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_lines(path: str | Path) -> Iterator[str]:
    """The lines of an input file (UTF-8).

    Raises:
        InvalidOptions: The file cannot be read or is not UTF-8.
    """
    try:
        with open(path, encoding="utf-8") as f:
            yield from f
    except OSError as e:
        raise InvalidOptions(f"cannot read the batch input {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise InvalidOptions(f"the batch input {path} is not UTF-8 text ({e.reason})") from None
