"""Small file-system helpers shared by the log modules: full writes, atomic replacement, directory fsync."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["O_BINARY", "fsync_dir", "fsync_file", "write_all", "write_file_atomically"]

O_BINARY: Final = getattr(os, "O_BINARY", 0)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    written = os.write(fd, data)
    if written < len(data):  # short writes are rare (signals, full disks): retry the rest
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def fsync_file(fd: int) -> None:
    """Flush a file's data (and the metadata needed to read it back) to stable storage."""
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:
        os.fsync(fd)


def fsync_dir(path: Path) -> None:
    """Make creations, renames and deletions in ``path`` durable (no-op if the directory cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file_atomically(path: Path, data: bytes, *, sync: bool) -> None:
    """Write ``data`` to a temporary file and rename it over ``path``; with ``sync``, fsync the file before
    the rename and the directory after it, so a crash leaves either the old or the new content."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | O_BINARY, 0o644)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)
