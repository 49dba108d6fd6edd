"""The engine across processes (obscura_jax.processes.cross_process, through the whole runtime):
llama2-tiny, p=4, m=8, 3 steps of AdamW, every schedule of numerics_cases (gpipe,
1f1b, recomp K=1 and K=all, strawman K=1, obscura K=1 with swapping) trained by 4
local processes x 1 CPU device, and by 2 processes x 2 devices (two stages per
process), each in ONE launch running all cases in turn; the 4 x 1 launch also runs
interleaved (V = 2), zb-h1, zb-v, obscura-interleaved and obscura-zb-h1 (split
backward, recompute, swapping) on llama2-tiny and gpt3-tiny, and the zoo's other
schedules on llama2-tiny (numerics_cases.MP_ZOO_CASES: 8 stages, two per process, for
the chunked ones).
Per-step losses equal the engine on one stage (`--stages 1`) and the unpipelined
model at rtol 1e-5; final params within the engine's documented tolerance
(checks.tolerances; widened where the step-1 gradient is rounding noise,
numerics_cases.adam_bound)."""
import io
import pickle
import sys
import threading
import time

import numpy as np
import pytest

import schedules

from obscura_jax.processes.supervise import launch_local
from obscura_jax.runtime.placement import place_stages
from obscura_jax.run.run_config import RunConfig
from obscura_jax.run.trainer import train
from tests.obscura_jax.numerics_cases import (B, CASES, IDS, M, MP_ZOO_CASES, MP_ZOO_IDS, STEPS, T, assert_params_match,
                                              make_reference, run_config)

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")]   # the launcher forks to exec
LAUNCH_TIMEOUT = 1200   # a hang bound for a busy 2-core CPU machine (20 runs in one launch, measured costs on the zoo ones)


def model_reference(name: str):
    """(cfg, unpipelined losses, its final params, its step-1 grads, the engine's
    losses on one stage)."""
    model, cfg, losses, params, grads, _ = make_reference(name)
    one_stage = train(RunConfig(model=model, stages=1, microbatches=M, steps=STEPS, micro_batch_size=B,
                                seq_len=T, measure_costs=False, record_timeline=False),
                      lambda p: place_stages(p, "cpu", 1), log=lambda *_: None)
    return cfg, losses, params, grads, [s.loss for s in one_stage.steps]


@pytest.fixture(scope="module")
def reference():
    return model_reference("llama2-tiny")


def run_launch(tmp_path, processes: int, per_process: int, zoo: bool = False, meanwhile=None) -> dict:
    log = io.StringIO()
    ids = IDS + (MP_ZOO_IDS if zoo else [])
    rc = _bounded(lambda: launch_local([str(tmp_path), str(per_process)] + (["zoo"] if zoo else []), processes,
                                       devices_per_process=per_process, out=log,
                                       command=[sys.executable, "-m", "tests.obscura_jax.multiprocess_driver"]),
                  meanwhile)
    assert rc == 0, log.getvalue()[-3000:]
    return {case: pickle.loads((tmp_path / f"case{i}.pkl").read_bytes()) for i, case in enumerate(ids)}


def _bounded(fn, meanwhile=None):
    """fn() in a thread, failing the test (not hanging CI) after LAUNCH_TIMEOUT s; the
    launcher's children die with it (PR_SET_PDEATHSIG) when pytest exits. meanwhile()
    runs here while fn does (the processes wait on each other: cores to spare)."""
    outcome = {}
    t = threading.Thread(target=lambda: outcome.setdefault("rc", fn()), daemon=True)
    t.start()
    started = time.monotonic()
    if meanwhile is not None:
        meanwhile()
    t.join(max(0.0, LAUNCH_TIMEOUT - (time.monotonic() - started)))
    if t.is_alive():
        pytest.fail(f"multi-process run not done after {LAUNCH_TIMEOUT} s")
    return outcome["rc"]


def check_results(results: dict, references: dict, stage_process, cases: dict) -> None:
    """cases: id -> (model, schedule, kw); references: model -> model_reference(model)."""
    for cfg, ref_losses, _, _, one_stage in references.values():
        np.testing.assert_allclose(one_stage, ref_losses, rtol=1e-5, err_msg=cfg.name)
    for case, res in results.items():
        model, _, kw = cases[case]
        cfg, ref_losses, ref_params, ref_grads, one_stage = references[model]
        want = stage_process[case] if isinstance(stage_process, dict) else stage_process
        assert res["stage_process"] == want, case
        np.testing.assert_allclose(res["losses"], one_stage, rtol=1e-5, err_msg=case)
        np.testing.assert_allclose(res["losses"], ref_losses, rtol=1e-5, err_msg=case)
        if kw.get("swap_fraction"):
            assert res["swap_bytes"] > 0, case
        assert_params_match(res["params"], ref_params, ref_grads, run_config(model, "1f1b", **kw), cfg, case)
    # one host: the true offset is 0, so each estimate is within its own error bound (half
    # its round trip: how long that is depends on the machine's load, the bound does not)
    first = next(iter(results.values()))
    offsets, errors = first["offsets"], first["offset_errors"]
    assert offsets[0] == 0.0, offsets
    assert all(abs(o) <= e + 1e-9 for o, e in zip(offsets, errors, strict=True)), (offsets, errors)


PLAIN = {i: ("llama2-tiny", n, k) for i, (n, k) in zip(IDS, CASES)}
ZOO = dict(zip(MP_ZOO_IDS, MP_ZOO_CASES))


@pytest.fixture(scope="module")
def four_processes(tmp_path_factory, reference):
    """One launch of 4 processes x 1 device running every case (PLAIN, then ZOO): one
    start-up for both tests below; gpt3-tiny's reference is computed meanwhile."""
    references = {"llama2-tiny": reference}

    def other_references():
        references.update({m: model_reference(m) for m, _, _ in MP_ZOO_CASES if m not in references})
    results = run_launch(tmp_path_factory.mktemp("four"), 4, 1, zoo=True, meanwhile=other_references)
    return results, references


def test_four_processes_one_device_each_train_like_the_plain_model(four_processes):
    results, references = four_processes
    check_results({i: results[i] for i in PLAIN}, references, [0, 1, 2, 3], PLAIN)


def test_two_processes_two_stages_each_train_like_the_plain_model(tmp_path, reference):
    check_results(run_launch(tmp_path, 2, 2), {"llama2-tiny": reference}, [0, 0, 1, 1], PLAIN)


def test_four_processes_run_chunked_and_split_backward_schedules_like_the_plain_model(four_processes):
    results, references = four_processes
    where = {i: list(schedules.generate(schedule, 4, M).stage_to_device) for i, (_, schedule, _) in ZOO.items()}
    assert where[f"llama2-tiny-zb-v-{{}}"] == [0, 1, 2, 3, 3, 2, 1, 0]
    check_results({i: results[i] for i in ZOO}, references, where, ZOO)
