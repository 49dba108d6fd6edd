import json
import math
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from planner.errors import ProfileError
from planner.profile import (FULL, OpProfile, UnitProfile, derive_profile, load_profile,
                             profile_from_json, save_profile, unit_kinds)
from tests.planner.synthetic import MB, synthetic_profile


def test_json_round_trip(tmp_path):
    prof = synthetic_profile()
    path = tmp_path / "p.json"
    save_profile(prof, path)
    again = load_profile(path)
    assert again == prof
    assert again.family == "llama"
    assert json.loads(path.read_text())["format"] == "obscura-profile/1"


def test_kept_bytes_and_recompute_time_follow_the_contract():
    attn = synthetic_profile().unit("attn")
    assert attn.kept_bytes(()) == 1 * MB + 5 * MB  # input + every op
    assert attn.kept_bytes({"q", "attn_core"}) == 1 * MB + 3 * MB
    assert attn.kept_bytes({FULL}) == attn.input_bytes
    assert attn.recompute_time({"q", "attn_core"}) == pytest.approx(0.5)
    assert attn.recompute_time({FULL}) == attn.fwd_time
    # a measured full recompute (optional key) prices "full" and caps every subset
    measured = UnitProfile(2.0, 4.0, 0, 0, {"q": OpProfile(0.3, 1), "k": OpProfile(0.9, 1)},
                           full_recompute_time=1.0)
    assert measured.recompute_time({FULL}) == 1.0
    assert measured.recompute_time({"q", "k"}) == 1.0 and measured.recompute_time({"q"}) == 0.3
    # never more than the whole forward, whatever the per-op figures say
    noisy = UnitProfile(1.0, 2.0, 0, 0, {"q": OpProfile(0.8, 1), "k": OpProfile(0.8, 1)})
    assert noisy.recompute_time({"q", "k"}) == 1.0
    assert unit_kinds(2) == ("embed", "attn", "mlp", "attn", "mlp", "head")


def test_full_recompute_time_round_trips_and_is_validated(tmp_path):
    from dataclasses import replace
    prof = synthetic_profile()
    attn = replace(prof.unit("attn"), full_recompute_time=0.25)
    prof = replace(prof, units=tuple((k, attn if k == "attn" else u) for k, u in prof.units))
    save_profile(prof, tmp_path / "p.json")
    again = load_profile(tmp_path / "p.json")
    assert again.unit("attn").full_recompute_time == 0.25 and again.unit("mlp").full_recompute_time is None
    doc = prof.to_json()
    doc["units"]["attn"]["full_recompute_time"] = -1
    with pytest.raises(ProfileError, match="full_recompute_time"):
        profile_from_json(doc)


def test_split_backward_times_are_optional_round_trip_and_price_the_stages(tmp_path):
    from dataclasses import replace

    from planner.costs import stage_costs
    old = synthetic_profile()
    assert all(u.input_grad_time is None and u.weight_grad_time is None for _, u in old.units)
    assert "input_grad_time" not in old.to_json()["units"]["attn"]          # old profiles stay as they were
    assert stage_costs(old, ((0, 9), (9, 18)), [(), ()]).input_grad == ()    # priced bwd / 2 by default
    units = tuple((k, replace(u, input_grad_time=0.25 * u.bwd_time, weight_grad_time=u.bwd_time,
                              weight_grad_bytes=7.0)) for k, u in old.units)
    prof = replace(old, units=units)
    save_profile(prof, tmp_path / "p.json")
    again = load_profile(tmp_path / "p.json")
    assert again == prof and again.unit("mlp").weight_grad_bytes == 7.0
    c = stage_costs(again, ((0, 9), (9, 18)), [(), ()])
    assert c.input_grad == pytest.approx(tuple(0.25 * b for b in c.bwd)) and c.weight_grad == pytest.approx(c.bwd)
    assert c.weight_grad_held == tuple(7.0 * (b - a) for a, b in ((0, 9), (9, 18)))
    doc = prof.to_json()
    doc["units"]["mlp"]["weight_grad_time"] = -1
    with pytest.raises(ProfileError, match="weight_grad_time"):
        profile_from_json(doc)


def test_a_rederiving_w_is_priced_from_its_own_fields(tmp_path):
    """weight_grad_rederive_time / _bytes: optional (older profiles load unchanged),
    validated, round-tripped; split_backward(weight_grad="rederive") prices W and its
    held block from them (I is the same), and refuses a profile without them."""
    from dataclasses import replace

    from planner.costs import split_backward, stage_views
    from planner.errors import PlanError
    old = synthetic_profile()
    hold = tuple((k, replace(u, input_grad_time=0.5, weight_grad_time=1.0, weight_grad_bytes=8.0)) for k, u in old.units)
    with pytest.raises(PlanError, match="weight_grad_rederive_time"):
        split_backward(replace(old, units=hold), stage_views(old, ((0, 18),)), weight_grad="rederive")
    units = tuple((k, replace(u, weight_grad_rederive_time=1.5, weight_grad_rederive_bytes=3.0)) for k, u in hold)
    prof = replace(old, units=units)
    save_profile(prof, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json") == prof
    views = stage_views(prof, ((0, 9), (9, 18)))
    assert split_backward(prof, views) == {"input_grad": (4.5, 4.5), "weight_grad": (9.0, 9.0),
                                           "weight_grad_held": (72.0, 72.0)}
    assert split_backward(prof, views, weight_grad="rederive") == {
        "input_grad": (4.5, 4.5), "weight_grad": (13.5, 13.5), "weight_grad_held": (27.0, 27.0)}
    with pytest.raises(PlanError, match="weight_grad must be one of hold, rederive"):
        split_backward(prof, views, weight_grad="recompute")
    # an analytic profile has W bytes but no I / W times: only the held block
    bytes_only = replace(old, units=tuple((k, replace(u, weight_grad_bytes=2.0)) for k, u in old.units))
    assert split_backward(bytes_only, views) == {"weight_grad_held": (18.0, 18.0)}
    doc = prof.to_json()
    doc["units"]["attn"]["weight_grad_rederive_bytes"] = "many"
    with pytest.raises(ProfileError, match="weight_grad_rederive_bytes must be a number"):
        profile_from_json(doc)


def test_derive_profile_keeps_per_layer_costs():
    prof = synthetic_profile(num_layers=8)
    big = derive_profile(prof, 88, model="llama-synthetic-88")
    assert big.num_layers == 88 and big.num_units == 178
    assert big.units == prof.units and big.model == "llama-synthetic-88"


def _doc():
    return synthetic_profile().to_json()


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.update(format="obscura-profile/2"), "not an obscura-profile/1"),
    (lambda d: d["units"].pop("mlp"), "missing unit 'mlp'"),
    (lambda d: d.pop("seq_len"), "missing key 'seq_len'"),
    (lambda d: d["units"]["attn"].update(fwd_time=-1.0), "negative"),
    (lambda d: d["units"]["attn"]["ops"]["q"].update(fwd_time=-0.5), "units.attn.ops.q.fwd_time is negative"),
    (lambda d: d["units"]["mlp"]["ops"].update(mlp_magic={"fwd_time": 0, "act_bytes": 0}), "unknown op 'mlp_magic'"),
    (lambda d: d["units"]["head"].update(bwd_time="fast"), "must be a number"),
    (lambda d: d["units"]["head"].update(bwd_time=True), "must be a number"),
    (lambda d: d["units"]["attn"].update(weight_bytes=math.inf), "must be finite"),
    (lambda d: d["units"].update(conv={}), "unknown unit kind 'conv'"),
    (lambda d: d.update(host_bandwidth=0), "must be > 0"),
    (lambda d: d.update(num_layers=0), "positive integer"),
    (lambda d: d["units"]["attn"]["ops"]["q"].pop("act_bytes"), "missing 'act_bytes'"),
    (lambda d: d["units"]["attn"]["ops"].pop("q"), "units.attn is missing op 'q' of the llama family"),
    (lambda d: d.update(offered_ops="q"), "'offered_ops' must be a list of op names"),
    (lambda d: d.update(num_layers=10 ** 9), "num_layers must be <= 4096 (a bound of the planner"),
])
def test_malformed_profiles_are_rejected_with_one_line(mutate, needle):
    d = _doc()
    mutate(d)
    with pytest.raises(ProfileError) as e:
        profile_from_json(json.loads(json.dumps(d, allow_nan=True)))
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


def test_gpt_ops_are_not_llama_ops():
    d = _doc()
    d["units"]["attn"]["ops"]["qkv"] = {"fwd_time": 0.1, "act_bytes": 1}
    with pytest.raises(ProfileError, match="unknown op 'qkv'.*llama"):
        profile_from_json(d)
    d["model"] = "gpt3-something"
    d["units"]["attn"]["ops"] = {"qkv": {"fwd_time": 0.1, "act_bytes": 1}}
    d["units"]["mlp"]["ops"] = {"mlp_up": {"fwd_time": 0.1, "act_bytes": 1}}
    d["units"]["embed"]["ops"] = d["units"]["head"]["ops"] = {}
    with pytest.raises(ProfileError, match="units.embed is missing op 'embed' of the gpt family"):
        profile_from_json(d)          # an op left out would vanish from the plan's memory
    d["offered_ops"] = ["qkv", "mlp_up"]          # what `profile --policy-ops qkv,mlp_up` writes
    prof = profile_from_json(d)
    assert prof.family == "gpt" and prof.to_json()["offered_ops"] == ["mlp_up", "qkv"]
    assert "offered_ops" not in synthetic_profile().to_json()       # a profile of every op names none


def test_load_profile_names_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="malformed profile .*bad.json"):
        load_profile(bad)
    with pytest.raises(ValueError, match="profile not found"):
        load_profile(tmp_path / "missing.json")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"format": "obscura-plan/1"}))
    with pytest.raises(ProfileError, match=r"wrong.json: not an obscura-profile/1"):
        load_profile(wrong)


def test_extra_keys_from_other_tools_are_accepted():
    d = _doc()
    d["tool"] = "someone else's profiler"
    d["units"]["attn"]["notes"] = "measured"
    assert profile_from_json(d) == synthetic_profile()


def test_scratch_bytes_round_trip_and_the_planner_counts_them(tmp_path):
    """units.K.scratch_bytes (XLA scratch of the unit's programs) is optional: an
    older profile without it loads as 0; with it, a stage's fixed bytes are its
    weights plus its units' scratch summed (an upper bound: the memory every plan
    peak and the feasibility floor start from)."""
    from dataclasses import replace

    from planner.costs import stage_costs, weight_bytes
    old = synthetic_profile()
    assert all(u.scratch_bytes is None and u.scratch == 0 for _, u in old.units)
    assert "scratch_bytes" not in old.to_json()["units"]["mlp"]
    scratch = {"embed": 5.0, "attn": 30.0, "mlp": 70.0, "head": 900.0}
    prof = replace(old, units=tuple((k, replace(u, scratch_bytes=scratch[k])) for k, u in old.units))
    save_profile(prof, tmp_path / "p.json")
    again = load_profile(tmp_path / "p.json")
    assert again == prof and again.unit("head").scratch_bytes == 900.0
    part = ((0, 9), (9, 18))
    before, after = stage_costs(old, part, [(), ()]), stage_costs(again, part, [(), ()])
    kinds = [again.kinds[0:9], again.kinds[9:18]]
    for s in (0, 1):
        assert after.weight_bytes[s] - before.weight_bytes[s] == sum(scratch[k] for k in kinds[s])
    assert weight_bytes(again, (9, 18)) == after.weight_bytes[1]
    doc = prof.to_json()
    doc["units"]["attn"]["scratch_bytes"] = -1
    with pytest.raises(ProfileError, match="scratch_bytes"):
        profile_from_json(doc)


def test_scale_micro_batch_is_linear_in_rows_and_keeps_weights():
    from planner.mesh_plan import scale_micro_batch
    from tests.planner.synthetic import synthetic_profile
    prof = synthetic_profile(split=True)
    two = scale_micro_batch(prof, 2)
    assert two.micro_batch == 2 and prof.micro_batch == 1
    for (k, a), (_, b) in zip(prof.units, two.units):
        assert b.weight_bytes == a.weight_bytes
        assert (b.fwd_time, b.bwd_time, b.input_bytes, b.weight_grad_bytes) == pytest.approx(
            (2 * a.fwd_time, 2 * a.bwd_time, 2 * a.input_bytes, 2 * a.weight_grad_bytes))
        assert b.kept_bytes(()) == pytest.approx(2 * a.kept_bytes(()))


def test_a_profile_hashes_as_it_compares_in_every_process(tmp_path):
    """The hash a search's caches key on is made once per process: a profile pickled
    in a process with another string-hash salt (a spawned figure job) hashes like an
    equal one made here."""
    prof = synthetic_profile()
    save_profile(prof, tmp_path / "p.json")
    make = ("import pickle, sys; from planner.profile import load_profile; "
            "p = load_profile(sys.argv[1]); hash(p); sys.stdout.buffer.write(pickle.dumps(p))")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", make, str(tmp_path / "p.json")], cwd=root, capture_output=True,
                          timeout=120, env={"PYTHONHASHSEED": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    there = pickle.loads(done.stdout)
    assert there == prof and hash(there) == hash(prof) and {there: 1}[prof] == 1
