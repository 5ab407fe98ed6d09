"""Files that survive a kill or a full disk: whole-file writes go to a temporary file or folder, are fsynced and
renamed into place; JSON-lines logs grow by single writes of whole lines, and their reader tolerates the one
torn line a kill can leave at the end.

No write follows a link: a rename replaces a symbolic link at the target rather than writing where it points,
and the only files opened in place (JSON-lines appends, a run's lock) are opened by `open_own_file`, which
refuses anything but a regular file with a single link."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

log = logging.getLogger(__name__)


_CONTROLS = "\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
"""What `printable` escapes but the newline (a character class's ranges)."""
_UNPRINTABLE, _UNPRINTABLE_BUT_NEWLINE = re.compile(f"[\n{_CONTROLS}]"), re.compile(f"[{_CONTROLS}]")


def printable(text: str, limit: int | None = 300, *, newlines: bool = False) -> str:
    r"""`text` safe in a log or on a terminal: control characters (C0, DEL, C1: escape sequences, carriage returns,
    newlines that would forge a log line), Unicode's line and paragraph separators and its direction overrides
    written as escapes, then cut to `limit` characters (None: uncut). `newlines` keeps "\n" (a document printed to
    a terminal) where a log line must stay one line. For text from outside the trainer: a scorer's reply, the names
    in a study file.

    >>> print(printable("ok\x1b[2J\nINFO fake line"), printable("x" * 10, 8))
    ok\x1b[2J\nINFO fake line xxxxx...
    """
    def escape(match: re.Match) -> str:
        return match.group().encode("unicode_escape").decode("ascii")

    text = (_UNPRINTABLE_BUT_NEWLINE if newlines else _UNPRINTABLE).sub(escape, text)
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def cache_root() -> Path:
    """Where credo caches built artefacts: `$CREDO_CACHE`, else `~/.cache/credo`; a NotADirectoryError naming the
    variable when it names something other than a directory."""
    root = Path(os.environ.get("CREDO_CACHE", Path.home() / ".cache" / "credo"))
    if root.exists() and not root.is_dir():
        where = f"CREDO_CACHE={root}" if "CREDO_CACHE" in os.environ else str(root)
        raise NotADirectoryError(f"{where} is not a directory: credo caches its built models there")
    return root


def fsync_path(path: Path) -> None:
    """Flush a file's contents, or a folder's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process's umask, read without changing it where the OS allows (Linux: /proc/self/status)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def default_mode(*, directory: bool = False) -> int:
    """The mode a plain `open` or `mkdir` would give: 0o666 (a file) or 0o777 (a folder) less the umask.

    `tempfile` creates owner-only files (0o600) and folders (0o700); what credo renames into place gets this
    mode instead, so that a run or a cache can be shared as the user's umask says."""
    return (0o777 if directory else 0o666) & ~current_umask()


def open_own_file(path: Path, flags: int) -> int:
    """A file descriptor on `path` for writing in place (`flags`, e.g. `O_WRONLY | O_APPEND | O_CREAT`), only if
    `path` is a regular file with a single link: a symbolic link there is not followed (`O_NOFOLLOW`), a FIFO
    does not block the open (`O_NONBLOCK`), and a symbolic link, a hard link, a FIFO or a device is an OSError
    naming `path`, so that no write through it lands outside its folder. A file it creates gets `default_mode`."""
    refused = OSError(f"{path} is a link or a special file, not a file credo wrote: credo does not write through it "
                      "(remove it, or check where this directory came from)")
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO):  # a symbolic link; a FIFO without a reader
            raise refused from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise refused
    return fd


def refuse_links(folder: Path) -> None:
    """An OSError naming the first of `folder`'s entries that is a symbolic link or neither a regular file nor a
    folder (a FIFO, a device or a socket, which would block or never end a read); none if `folder` does not exist."""
    if not folder.is_dir():
        return
    for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
        if entry.is_symlink() or not (entry.is_file() or entry.is_dir()):
            raise OSError(f"{entry.path} is a symbolic link or a special file: credo writes, reads, removes and "
                          f"locks files in {folder} and follows no link there (remove it, or check where this "
                          "directory came from)")


def check_regular_file(path: Path) -> Path:
    """`path`, if it is a regular file that is not a symbolic link; else an OSError naming it. A FIFO blocks a read
    forever and `/dev/zero` never ends one, so a file credo reads from a folder it may not have written (a shared
    report, a downloaded run, a checkpoint) is checked first; a missing file is FileNotFoundError as usual."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(f"{path} is a symbolic link or a special file (a FIFO or a device would block or never end the "
                      "read), not a file credo wrote: remove it, or check where this folder came from")
    return path


def path_inside(folder: Path, name: str) -> Path:
    """`folder / name`, for a `name` read from a file (a report's difficulty or metric): a ValueError naming it
    unless it is a relative path without `..`, a backslash or a NUL, and `folder / name` resolves inside
    `folder` (no link on the way leads out)."""
    path = folder / name
    if (Path(name).is_absolute() or ".." in Path(name).parts or "\\" in name or "\0" in name
            or not path.resolve().is_relative_to(folder.resolve())):
        shown = name if len(name) <= 100 else name[:97] + "..."
        raise ValueError(f"{folder}: refusing the file name {shown!r}, which leads outside the folder (a name read "
                         "from a file here must not hold '..', '/' at its start, '\\' or a link leading out)")
    return path


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` into `path` through a fsynced temporary file renamed into place."""
    write_lines_atomic(path, [text])


def write_lines_atomic(path: Path, pieces: Iterable[str]) -> None:
    """Write `pieces` one after another into `path` through a fsynced temporary file renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, default_mode())
        with os.fdopen(fd, "w") as handle:
            for piece in pieces:
                handle.write(piece)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def append_jsonl(path: Path, record: dict) -> None:
    """Append `record` as one line, in a single write; a write cut short (a full disk) is undone. `path` must be
    a regular file with a single link, or not exist (`open_own_file`).

    A kill can still tear the line (the kernel may have written part of it): `iter_jsonl` skips such a
    torn last line.
    """
    data = (json.dumps(record) + "\n").encode()
    fd = open_own_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            while written < len(data):  # only on a full disk, whose next write raises
                written += os.write(fd, data[written:])
        except OSError as error:
            os.ftruncate(fd, size)
            raise OSError(error.errno, error.strerror, str(path)) from error
    finally:
        os.close(fd)


def iter_jsonl(path: Path, schema: type[BaseModel] | None = None) -> Iterator[dict]:
    """The records of a JSON-lines file, read one line at a time (blank lines skipped; none if it does not exist).

    A last line without its newline that is not valid JSON (an append torn by a kill or a full disk) is
    skipped with a warning naming the file; a malformed line anywhere else, or a record that `schema` (a
    pydantic model) refuses, is a ValueError naming the file, the line number and the field.
    """
    if not path.exists():
        return
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as error:
                if not line.endswith(b"\n"):
                    log.warning("%s: skipped 1 torn last line (%d bytes without a newline, from a write that was cut "
                                "short)", path, len(line))
                    return
                reason = (f"{error.msg.removesuffix(' at')} at column {error.colno}"
                          if isinstance(error, json.JSONDecodeError) else str(error))
                raise ValueError(f"{path}, line {number}: not a JSON record ({reason})") from None
            if schema is not None:
                try:
                    schema.model_validate(record)
                except ValidationError as error:
                    raise ValueError(f"{path}, line {number}: {validation_problem(error)}") from None
            yield record


def read_jsonl(path: Path, schema: type[BaseModel] | None = None) -> list[dict]:
    """`iter_jsonl` as a list."""
    return list(iter_jsonl(path, schema))


def validation_problem(error: ValidationError) -> str:
    """A pydantic error's first problem in one short line: the field and what is wrong with it."""
    problem = error.errors()[0]
    field = ".".join(str(part) for part in problem["loc"])  # empty for a check of the whole record, whose message names it
    message = problem["msg"].removeprefix("Value error, ")
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{field + ': ' if field else ''}{message[:200]}{more}"


def write_jsonl_atomic(path: Path, records: Iterable[dict]) -> None:
    """Replace `path` by `records`, one line each, streamed through a fsynced temporary file."""
    write_lines_atomic(path, (json.dumps(record) + "\n" for record in records))


@contextlib.contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success its files are fsynced and it replaces `target` in one rename.

    The temporary folder is named `.<target name>.<random>` and a replaced target `.<target name>.old` for the
    moment of the swap; `recover_directories` tidies both after a kill.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        tmp.chmod(default_mode(directory=True))
        yield tmp
        for folder, _, files in os.walk(tmp):
            for name in files:
                fsync_path(Path(folder) / name)
            fsync_path(Path(folder))
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
        fsync_path(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def recover_directories(parent: Path, pattern: str) -> list[Path]:
    """Tidy what killed `atomic_directory` swaps left in `parent` among targets matching `pattern`.

    A `.<name>.old` whose `<name>` is missing (killed between the two renames) is renamed back; other
    `.<name>.*` temporaries are removed. Returns the removed paths.
    """
    removed = []
    if not parent.is_dir():
        return removed
    for old in parent.glob(f".{pattern}.old"):
        original = parent / old.name[1:-len(".old")]
        if not original.exists():
            os.replace(old, original)
    for stale in parent.glob(f".{pattern}.*"):
        shutil.rmtree(stale, ignore_errors=True)
        removed.append(stale)
    return removed


def check_torch_archive(path: Path, error: type[Exception] = ValueError) -> None:
    """Refuse (`error`) a torch file that could inflate on load: a checkpoint's `trainer.pt`, a model directory's
    `*.bin` weights. torch.save writes a zip archive whose members are stored uncompressed, so what `torch.load`
    reads is at most the file's size; a compressed member (a few kilobytes of DEFLATE can hold gigabytes) or
    members declaring more bytes than the file holds (entries sharing the same bytes) are never torch.save's. A
    file that begins as a zip archive (torch's own test) but cannot be read as one is a BadZipFile; other bytes
    are left to torch.load, which reads them as a pickle (a bare one, or torch's legacy format: uncompressed)."""
    with path.open("rb") as handle:
        if handle.read(4) != b"PK\x03\x04":
            return
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
    compressed = next((m for m in members if m.compress_type != zipfile.ZIP_STORED), None)
    declared, size = sum(m.file_size for m in members), path.stat().st_size
    if compressed is not None or declared > size:
        why = (f"its member {compressed.filename[:100]!r} is compressed" if compressed is not None
               else f"its members declare {declared:,} bytes, more than the file's {size:,}")
        raise error(f"refusing to load {path}: {why}; torch.save stores every member uncompressed, so torch.save "
                    "did not write it (loading it could take far more memory than its size)")
