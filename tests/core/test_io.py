import json
import os

import pytest

from iclr26.core.io import atomic_write, read_json, write_json


def test_atomic_write_replaces_whole_file(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    atomic_write(target, "first")
    atomic_write(target, "second")
    assert target.read_text() == "second"
    assert [p.name for p in target.parent.iterdir()] == ["out.txt"]  # no temp files left behind


def test_failed_write_leaves_previous_content(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    write_json(target, {"a": 1})

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        write_json(target, {"a": 2})
    assert read_json(target) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_json_is_standard_and_stable(tmp_path):
    import numpy as np

    path = write_json(tmp_path / "x.json", {"b": np.float64(1.5), "a": float("nan"), "c": np.arange(2)})
    text = path.read_text()
    assert json.loads(text) == {"a": None, "b": 1.5, "c": [0, 1]}
    assert text.index('"a"') < text.index('"b"')  # sorted keys: same content, same bytes


def test_read_json_names_the_file(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="broken.json"):
        read_json(bad)


def test_outputs_keep_the_users_umask(tmp_path):
    """mkstemp makes 0600 files; an output must be what open() would make (0644 under umask 022),
    so that a DVC round trip (which restores 0644) changes no mode."""
    import stat

    current = os.umask(0)
    os.umask(current)
    target = atomic_write(tmp_path / "out.txt", "x")
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~current
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert stat.S_IMODE(target.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)
