"""dora.io: output paths refused before any work, atomic writes that leave nothing on failure,
UTF-8 reads; dora.limits: the memory and time limits."""

from __future__ import annotations

import errno

import pytest

from dora.errors import InputError
from dora.io import atomic_path, check_output, check_output_dir, read_text, write_text
from dora.limits import check_memory, check_time, memory_limit


def test_atomic_write_replaces_the_target_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "a" / "b" / "out.json"
    write_text(p, "one")
    write_text(p, "two")
    assert p.read_text() == "two"
    assert sorted(x.name for x in p.parent.iterdir()) == ["out.json"]


@pytest.mark.parametrize("error", [RuntimeError("the writer failed"), OSError(errno.ENOSPC, "No space left on device")])
def test_a_failed_write_leaves_nothing_new(tmp_path, error):
    """The temporary and the folders made for it go; an existing file keeps its old content."""
    old = tmp_path / "old.csv"
    old.write_text("old")
    for target in (tmp_path / "new" / "deeper" / "t.csv", old):
        with pytest.raises(InputError if isinstance(error, OSError) else RuntimeError):
            with atomic_path(target) as tmp:
                tmp.write_text("half")
                raise error
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["old.csv"]
    assert old.read_text() == "old"


def test_an_oserror_becomes_one_line_naming_the_output(tmp_path):
    with pytest.raises(InputError, match=r"output .*t\.csv: cannot write \(No space left on device\)"):
        with atomic_path(tmp_path / "t.csv"):
            raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("name, needle", [
    ("", "empty path"), ("OUT", "is a directory"), ("IN/file.txt/x.json", "not a folder"),
    ("IN/dangling", "dangling"), ("IN/dangling_dir/x.json", "dangling"), ("OUT/" + "n" * 256 + ".json", "longer"),
    ("OUT/x.txt", "unknown file type"), ("OUT/a\0b.json", "NUL"), ("IN/file.txt", "unknown file type"),
])
def test_check_output_refuses(tmp_path, name, needle):
    (tmp_path / "OUT").mkdir()
    (tmp_path / "IN").mkdir()
    (tmp_path / "IN" / "file.txt").write_text("x")
    (tmp_path / "IN" / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "IN" / "dangling_dir").symlink_to(tmp_path / "nowhere")
    path = str(tmp_path / name) if name else ""
    with pytest.raises(InputError, match=needle):
        check_output(path, ("json",))
    assert sorted(p.name for p in (tmp_path / "OUT").iterdir()) == []


def test_check_output_accepts_new_folders_and_existing_files(tmp_path):
    (tmp_path / "old.json").write_text("{}")
    assert check_output(tmp_path / "new" / "x.json", ("json",)).name == "x.json"
    assert check_output(tmp_path / "old.json", ("json",)).name == "old.json"
    assert not (tmp_path / "new").exists()


def test_check_output_dir(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a file"):
        check_output_dir(tmp_path / "f")
    with pytest.raises(InputError, match="not a folder"):
        check_output_dir(tmp_path / "f" / "run")
    assert check_output_dir(tmp_path / "run" / "a") == tmp_path / "run" / "a"


def test_read_text_names_the_line_that_is_not_utf8(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(InputError, match=r"c.yaml line 2: not UTF-8 text \(byte 0xe9\)"):
        read_text(p, "config file", "fix it")
    with pytest.raises(InputError, match="not found; fix it"):
        read_text(tmp_path / "missing", "config file", "fix it")
    with pytest.raises(InputError, match="is a directory"):
        read_text(tmp_path, "config file", "fix it")


def test_limits_from_the_environment(monkeypatch):
    monkeypatch.setenv("DORA_MEMORY_LIMIT_GIB", "1.5")
    assert memory_limit() == int(1.5 * 2 ** 30)
    check_memory("run", 2 ** 30, "fix")
    with pytest.raises(InputError, match=r"run: needs about 2.0 GiB of memory, over this machine's limit of 1.5 GiB"):
        check_memory("run", 2 ** 31, "lower it")
    monkeypatch.setenv("DORA_TIME_LIMIT_S", "60")
    check_time("run", 59, "fix")
    with pytest.raises(InputError, match=r"run: would run about 0.03 h, over the limit of 0.02 h"):
        check_time("run", 120, "fix")
    for bad in ("0", "-1", "nan", "inf", "lots"):
        monkeypatch.setenv("DORA_MEMORY_LIMIT_GIB", bad)
        with pytest.raises(InputError, match="DORA_MEMORY_LIMIT_GIB"):
            memory_limit()
