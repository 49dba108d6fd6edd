"""Byte sizes from and for people (schedules.sizes): the one parser and formatter."""
import pytest

from models.errors import ObscuraError
from planner.errors import PlanError
from schedules.sizes import GiB, format_bytes, parse_bytes


@pytest.mark.parametrize("text, want", [
    ("80GiB", 80 * GiB), ("85.9GB", 85.9e9), ("512MiB", 512 * 2 ** 20), ("1e9", 1e9), ("123", 123.0),
    (4096, 4096.0), (2.5e3, 2500.0), ("1.5 kib", 1536.0), ("2TB", 2e12), (" 7 b ", 7.0)])
def test_parse(text, want):
    assert parse_bytes(text) == want


@pytest.mark.parametrize("bad", ["", "lots", "80 GiBs", "-5GB", "0", 0, True, "GB", float("nan"), -1])
def test_parse_rejects_with_one_line(bad):
    with pytest.raises(ObscuraError) as err:
        parse_bytes(bad, "memory size")
    assert "memory size" in str(err.value) and "\n" not in str(err.value)


def test_parse_zero_only_when_allowed_and_the_error_class_is_the_callers():
    assert parse_bytes("0", allow_zero=True) == 0.0
    with pytest.raises(PlanError, match="memory limit"):
        parse_bytes("lots", "memory limit", error=PlanError)


@pytest.mark.parametrize("n, decimals, text", [
    (None, 1, "-"), (0, 1, "0 B"), (512, 1, "512 B"), (1536, 1, "1.5 KiB"), (80 * GiB, 1, "80.0 GiB"),
    (80 * GiB, 2, "80.00 GiB"), (3 * 2 ** 40, 1, "3.0 TiB"), (-2 * GiB, 1, "-2.0 GiB")])
def test_format(n, decimals, text):
    assert format_bytes(n, decimals) == text
