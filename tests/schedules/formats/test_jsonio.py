"""schedules.formats.jsonio's input and output guards (for Python API users): only a
regular file is opened, within a size bound; JSON too deep or with a huge integer is
one line naming the file; an existing FIFO or device node is never replaced."""
import os
import time

import pytest

from models.errors import ObscuraError
from schedules.formats import jsonio
from schedules.formats.jsonio import check_writable, file_kind, read_json, read_text, write_json_atomic, write_text_atomic


def _one_line(call, *args):
    """The ObscuraError `call(*args)` raises, checked to be one line and quick."""
    t0 = time.process_time()
    with pytest.raises(ObscuraError) as e:
        call(*args)
    assert time.process_time() - t0 < 1.0  # CPU, not wall time: a busy machine is not a bug
    text = str(e.value)
    assert "\n" not in text and text
    return text


def test_read_json_opens_only_regular_files(tmp_path):
    os.mkfifo(tmp_path / "fifo")     # opened, the read would block for ever
    assert _one_line(read_json, tmp_path / "fifo", "costs JSON") == f"costs JSON {tmp_path}/fifo: is a FIFO, not a regular file"
    assert _one_line(read_json, "/dev/zero") == "JSON file /dev/zero: is a character device, not a regular file"
    assert "is a directory, not a regular file" in _one_line(read_json, tmp_path)
    assert "not found" in _one_line(read_json, tmp_path / "none.json")
    (tmp_path / "link.json").symlink_to(tmp_path / "fifo")
    assert "is a FIFO" in _one_line(read_json, tmp_path / "link.json")
    assert file_kind(tmp_path / "fifo") == "a FIFO" and file_kind(tmp_path / "none") is None


def test_read_json_bounds_nesting_and_integers(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    assert _one_line(read_json, deep, "schedule JSON") == (f"schedule JSON {deep}: JSON nested 200000 deep; at most "
                                                        "500 levels are read")
    big = tmp_path / "bigint.json"
    big.write_text('{"num_stages": ' + "9" * 5000 + "}")
    assert _one_line(read_json, big) == f"JSON file {big}: JSON holds an integer of 5000 digits; at most 1000 are read"
    big.write_text('[-' + "9" * 1001 + "]")
    assert "integer of 1001 digits" in _one_line(read_json, big)
    ok = tmp_path / "ok.json"
    ok.write_text('{"a": [' + "9" * 1000 + ", 1.5]}")
    assert read_json(ok)["a"][1] == 1.5


def test_read_text_bounds_the_size(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonio, "MAX_READ_BYTES", 10)
    f = tmp_path / "big.json"
    f.write_text("[" + "1," * 20 + "1]")
    assert "at most 10 (256 MiB) are read" in _one_line(read_json, f)
    f.write_text("[1]")
    assert read_json(f) == [1]


def test_read_text_names_bad_utf8(tmp_path):
    f = tmp_path / "latin1.csv"
    f.write_bytes(b"\xff\xfe")
    assert _one_line(read_text, f, "torch CSV") == f"torch CSV {f} is not UTF-8 text (byte 0xff at offset 0)"


def test_an_existing_fifo_or_device_is_never_replaced(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    assert _one_line(check_writable, tmp_path / "fifo", "--json") == \
        f"--json {tmp_path}/fifo: is a FIFO, not a regular file: refusing to replace it"
    assert "/dev/null: is a character device" in _one_line(check_writable, "/dev/null", "--csv")
    assert "refusing to replace it" in _one_line(write_json_atomic, tmp_path / "fifo", {})
    (tmp_path / "link").symlink_to(tmp_path / "fifo")          # written through: the FIFO again
    assert "refusing to replace it" in _one_line(write_text_atomic, tmp_path / "link", "x")
    # (no write to /dev/null here: were the guard broken, a test run as root would replace it)
    assert file_kind(tmp_path / "fifo") == "a FIFO" and file_kind("/dev/null") == "a character device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link"]     # no temporary file left
    check_writable(tmp_path / "new.json", "--json")             # regular or absent: fine
    write_json_atomic(tmp_path / "new.json", {"a": 1})
    check_writable(tmp_path / "new.json", "--json")
