import jax
import pytest

from obscura_jax.errors import UsageError
from obscura_jax.runtime.placement import parse_stage_devices, place_across_processes, place_stages


def test_one_device_per_stage():
    pl = place_stages(4, "cpu", 4)
    assert [d.id for d in pl.devices] == [d.id for d in jax.devices("cpu")[:4]]
    assert not pl.shared and pl.note == ""


def test_round_robin_when_fewer_devices_says_so():
    pl = place_stages(5, "cpu", 2)
    ids = [d.id for d in pl.devices]
    assert ids == [ids[0], ids[1], ids[0], ids[1], ids[0]]
    assert pl.shared and "round-robin" in pl.note


def test_single_device_shared_note():
    pl = place_stages(3, "cpu", 1)
    assert "all 3 stages share one" in pl.note


def test_explicit_stage_devices():
    pl = place_stages(3, "cpu", 8, parse_stage_devices("7,0,3", 3))
    assert [d.id for d in pl.devices] == [jax.devices("cpu")[i].id for i in (7, 0, 3)]


@pytest.mark.parametrize("call, msg", [
    (lambda: place_stages(4, "cpu", 99), "only"),
    (lambda: place_stages(2, "cpu", 4, (0, 9)), "does not exist"),
    (lambda: parse_stage_devices("0,a", 2), "comma-separated"),
    (lambda: parse_stage_devices("0,1,2", 2), "3 devices for 2 stages"),
    (lambda: place_stages(0, "cpu", 4), ">= 1"),
])
def test_impossible_placements_are_one_line_errors(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


def test_gpu_request_without_gpu():
    if jax.devices()[0].platform == "gpu":
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="no GPU"):
        place_stages(2, "gpu", 0)


def test_across_processes_stages_go_in_contiguous_blocks():
    """(In one process every device is this process's; the rule is the same.)"""
    pool = jax.devices("cpu")
    n = len(pool)
    pl = place_across_processes(2 * n, "cpu")
    assert [d.id for d in pl.devices] == [pool[s // 2].id for s in range(2 * n)]
    assert "contiguous" in pl.note
    assert place_across_processes(n, "cpu").note == ""
    with pytest.raises(UsageError, match="cannot keep"):
        place_across_processes(n - 1, "cpu")
    assert [d.id for d in place_across_processes(3, "cpu", (0, 0, 1)).devices] == [pool[0].id] * 2 + [pool[1].id]
