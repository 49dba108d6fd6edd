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


def test_integers_numbers_and_lists_take_ascii_digits_only():
    """The one parser of typed values: other scripts' digits are no number (int()
    and float() read "٣" as 3), an empty list item is a typo."""
    from schedules.sizes import MAX_DIGITS, parse_int, parse_real, split_items
    assert parse_int(" 12 ") == 12 and parse_int("-3") == -3 and parse_int(7) == 7
    assert parse_real("1e-3") == 0.001 and parse_real(".5") == 0.5 and parse_real("inf") == float("inf")
    assert split_items("a, b", "--policy") == ("a", "b") and split_items("full", "x") == ("full",)
    for bad in ("٣", "١٢", "1.5", "", " ", "0x10", "1_000", "۱", "३"):
        with pytest.raises(ObscuraError, match="--stages must be an integer \\(ASCII digits\\)"):
            parse_int(bad, "--stages")
    with pytest.raises(ObscuraError, match=f"integer of {MAX_DIGITS + 1} digits; at most {MAX_DIGITS}"):
        parse_int("9" * (MAX_DIGITS + 1), "--layers")
    for bad in ("١.٥", "e5", "", "1e", "abc", "1_0"):
        with pytest.raises(ObscuraError, match="--lr must be a number \\(ASCII digits\\)"):
            parse_real(bad, "--lr")
    for bad, why in (("", "is empty"), (",,", "is empty"), ("1f1b,", "has an empty item"), ("a,,b", "empty item")):
        with pytest.raises(ObscuraError, match=why):
            split_items(bad, "--schedules")
    with pytest.raises(ObscuraError, match="not a size"):
        parse_bytes("٨٠GiB")
