"""`obscura plan --offload OPS`: the plan counts the offloaded ops' bytes as host
bytes (its device peaks drop by them), says so after the table, and refuses a bad
set with one line, exit 2, nothing written."""
import pytest

from obscura_jax.cli.main import main
from planner.plan import load_plan
from planner.profile import save_profile
from schedules.sizes import format_bytes
from tests.obscura_jax.cli.commands.badinput import check
from tests.planner.synthetic import MB, synthetic_profile

ARGS = ["--stages", "4", "--microbatches", "8", "--memory-limit", "400MiB", "--no-families"]


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("prof") / "profile.json"
    save_profile(synthetic_profile(num_layers=8), path)
    return path


def test_plan_offload_counts_host_bytes_off_the_device_peaks(profile_path, tmp_path, capsys):
    plain, off = tmp_path / "plain.json", tmp_path / "off.json"
    assert main(["plan", "--profile", str(profile_path), *ARGS, "--json", str(plain)]) == 0
    capsys.readouterr()
    assert main(["plan", "--profile", str(profile_path), *ARGS, "--offload", "mlp_up,mlp_gate",
                 "--json", str(off)]) == 0
    out = capsys.readouterr().out
    a, b = load_plan(plain), load_plan(off)
    assert all(st.recompute == () for st in a.stages + b.stages)     # 1F1B fits both: the same stages
    # 1F1B: stage s holds p - s micro-batches; each of its layers keeps 2 x 2.7 MiB of gate and up on host
    for s, (x, y) in enumerate(zip(a.stages, b.stages, strict=True)):
        host = 2 * 2.7 * MB * 2 * (4 - s)        # 2 layers a stage, 4 - s micro-batches in flight
        assert x.predicted_peak_bytes - y.predicted_peak_bytes == pytest.approx(host)
    assert "offload mlp_gate, mlp_up: counted as host bytes, not device bytes" in out
    assert f"stage 0 {format_bytes(2 * 2 * 2.7 * MB, 2)}" in out and "that fits the limit" in out
    assert "train this plan with --offload mlp_gate,mlp_up" in out


def test_plan_offload_that_no_longer_fits_with_the_reload_says_so(profile_path, capsys):
    assert main(["plan", "--profile", str(profile_path), *ARGS[:4], "--memory-limit", "140MiB", "--no-families",
                 "--offload", "mlp_gate,mlp_up,mlp_act,mlp_mul"]) == 0
    out = capsys.readouterr().out
    # stage 0's device peak fits 140 MiB, not with one micro-batch's 21.6 MiB of offloaded bytes back on it
    assert "stage(s) 0 would then pass the limit: plan again with --reserve 21.60 MiB" in out


@pytest.mark.parametrize("offload, needle", [
    ("mlp_gate,,mlp_up", "--offload: offload 'mlp_gate,,mlp_up' has an empty item"),
    ("qkv", "--offload: unknown offload op name 'qkv' for llama"),
    ("", "--offload: offload names no op"),
])
def test_a_bad_offload_set_is_one_line(offload, needle, profile_path, capsys, tmp_path, monkeypatch):
    check(capsys, tmp_path, monkeypatch, ["plan", "--profile", str(profile_path), *ARGS, "--offload", offload,
                                          "--json", "{tmp}/plan.json"], needle)


def test_plan_offload_of_a_registered_model_says_its_traced_check_is_off(capsys):
    """A registered model's plan checks kept bytes against the traced residuals; the
    offloaded profile no longer matches them, and the plan says so."""
    assert main(["plan", "--analytic", "llama2-tiny", "--seq-len", "64", "--stages", "2", "--microbatches", "4",
                 "--memory-limit", "1GiB", "--offload", "mlp_gate"]) == 0
    out = capsys.readouterr().out
    assert "note: with --offload the planner checks kept bytes with the profile's per-op figures only" in out
