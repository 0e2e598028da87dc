"""Files the command lines read and write, with one-line errors (InputError).

Outputs: `check_output(path)` refuses, before any work, a path that cannot be written (a
directory, a dangling link, a parent that is a file, a read-only place, a name too long, a wrong
suffix); `atomic_path(path)` yields a temporary name beside the target and renames it into place
when the block ends without error (on an error the temporary and any folder it made are removed:
a refused or failed write leaves nothing). Inputs: `read_text` reads UTF-8 text.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from dora.errors import InputError

NAME_MAX = 255  # bytes of one file name (Linux)
PATH_MAX = 4096


def _check_lengths(p: Path, flag: str) -> None:
    """InputError for a path or one of its names too long for the system (before any stat of it)."""
    if len(os.fsencode(os.path.abspath(p))) >= PATH_MAX:
        raise InputError(f"{flag} {str(p)[:40]}...: path longer than {PATH_MAX - 1} bytes; use a shorter path")
    for part in p.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise InputError(f"{flag} {part[:40]}...: a name longer than {NAME_MAX} bytes; use a shorter name")


def _types(types: tuple[str, ...] | None) -> tuple[str, ...]:
    return tuple("." + t.lstrip(".").lower() for t in types or ())


def _existing_ancestor(folder: Path, flag: str, p: Path) -> Path:
    """The nearest folder of `folder` (itself included) that exists; InputError where a part of
    the path is a file or a dangling link."""
    for q in (folder, *folder.parents):
        if q.is_symlink() and not q.exists():
            raise InputError(f"{flag} {p}: {q} is a dangling symbolic link; remove it or choose another place")
        if q.exists():
            if not q.is_dir():
                raise InputError(f"{flag} {p}: {q} is a file, not a folder; choose a path inside a folder")
            return q
    return Path(".")


def check_writable_folder(folder: Path, flag: str, p: Path) -> None:
    """InputError unless files can be created in `folder` (or in its nearest existing ancestor,
    where the folders would be made): tried with an unnamed temporary file."""
    base = _existing_ancestor(folder, flag, p)
    try:
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as e:
        raise InputError(f"{flag} {p}: cannot create files in {base} ({e.strerror or type(e).__name__}); "
                         "choose a writable place") from None


def check_output(path: str | Path, types: tuple[str, ...] | None = None, flag: str = "output",
                 example: str = "out") -> Path:
    """Refuse an output file path before any work; returns it as a Path. `types`: the suffixes
    allowed (e.g. ("png", "svg")); `example`: a file name the message suggests inside a folder."""
    text = os.fspath(path)
    if not text.strip():
        raise InputError(f"{flag}: empty path; give a file path")
    if "\0" in text:
        raise InputError(f"{flag} {text!r}: contains a NUL character; give a plain file path")
    p = Path(text)
    _check_lengths(p, flag)
    allowed = _types(types)
    if p.is_symlink() and not p.exists():
        raise InputError(f"{flag} {p}: a dangling symbolic link (to {os.readlink(p)}); remove it or choose another "
                         "path")
    if p.is_dir():
        name = example + (allowed[0] if allowed and not Path(example).suffix else "")
        raise InputError(f"{flag} {p}: is a directory; give a file path such as {p / name}")
    if p.exists() and not p.is_file():
        raise InputError(f"{flag} {p}: exists and is not a regular file; choose another path")
    if allowed and p.suffix.lower() not in allowed:
        raise InputError(f"{flag} {p}: unknown file type '{p.suffix}'; use " + " or ".join(allowed))
    check_writable_folder(p.parent, flag, p)
    return p


def check_output_dir(path: str | Path, flag: str = "--out") -> Path:
    """Refuse an output folder path before any work (a file, a dangling link, a read-only place)."""
    text = os.fspath(path)
    if not text.strip():
        raise InputError(f"{flag}: empty path; give a folder")
    p = Path(text)
    _check_lengths(p, flag)
    if p.is_symlink() and not p.exists():
        raise InputError(f"{flag} {p}: a dangling symbolic link; remove it or choose another folder")
    if p.exists() and not p.is_dir():
        raise InputError(f"{flag} {p}: is a file; {flag} names a folder, so give a folder path")
    check_writable_folder(p, flag, p)
    return p


def _make_folders(folder: Path) -> list[Path]:
    """mkdir -p; the folders it created, outermost first."""
    made = [q for q in (folder, *folder.parents) if not q.exists()][::-1]
    folder.mkdir(parents=True, exist_ok=True)
    return made


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` (same suffix) to write; renamed onto `path` when the block
    ends. On any error the temporary and the folders made for it are removed; an OSError becomes
    an InputError naming the output."""
    p = Path(path)
    made: list[Path] = []
    tmp = p.with_name(f".{secrets.token_hex(4)}.tmp{p.suffix}")
    try:
        made = _make_folders(p.parent)
        yield tmp
        os.replace(tmp, p)
    except BaseException as e:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
        for q in reversed(made):  # only the folders this call made, and only while empty
            with suppress(OSError):
                q.rmdir()
        if isinstance(e, OSError):
            raise InputError(f"output {p}: cannot write ({e.strerror or type(e).__name__}); check the place and "
                             "its free space") from None
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 text atomically."""
    p = Path(path)
    with atomic_path(p) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return p


def read_text(path: str | Path, what: str, hint: str) -> str:
    """A file's UTF-8 text; InputError '<what> <path>: <problem>; <hint>' when it is missing, a
    folder, unreadable or not UTF-8."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what} {p}: not found; {hint}")
    if p.is_dir():
        raise InputError(f"{what} {p}: is a directory; {hint}")
    if not p.is_file():  # a pipe or a device: reading could wait forever
        raise InputError(f"{what} {p}: not a regular file; {hint}")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"{what} {p}: cannot read ({e.strerror or type(e).__name__}); check its permissions") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise InputError(f"{what} {p} line {line}: not UTF-8 text (byte 0x{data[e.start]:02x}); save it as "
                         "UTF-8") from None
