"""One process of a multi-process test run (started by obscura_jax.processes.launch.launch_local
with command `python -m tests.obscura_jax.multiprocess_driver`): trains every case of
numerics_cases.CASES on llama2-tiny (with `zoo`, after them MP_ZOO_CASES: chunks per
device and the split backward, each case naming its model) in turn on its share of
the stages, and process 0 writes each case's losses and gathered final params to
OUT/case<i>.pkl (plus the clock offsets).

    python -m tests.obscura_jax.multiprocess_driver OUT DEVICES_PER_PROCESS [zoo]
"""
import os
import pickle
import sys

from obscura_jax.cli import gc_policy
from obscura_jax.processes.distributed import gather_params, run_distributed
from obscura_jax.processes.launch import process_spec
from obscura_jax.runtime.placement import place_across_processes
from obscura_jax.observe.summary import summarize
from obscura_jax.run.trainer import train
from tests.obscura_jax.numerics_cases import CASES, MP_ZOO_CASES, run_config


def body(group, out: str, cases, measured: int) -> int:
    """Cases from index `measured` on take `obscura train`'s default path: measured
    costs, the measured timeline and the summary built from them (one timed sample
    a program, as the command matrix's `--cost-reps 1`: the same path, a third of
    the timed runs)."""
    offsets = group.gather("clock-offsets", group.clock_offset)
    errors = group.gather("clock-offset-errors", group.clock_offset_error)
    for i, (model, schedule, kw) in enumerate(cases):
        outcome = train(run_config(model, schedule, measured=i >= measured, cost_reps=1, **kw),
                        lambda p: place_across_processes(p, "cpu"), log=lambda *_: None, group=group)
        if i >= measured:
            summarize(outcome)
        params = gather_params(outcome, group)
        stages = [d.process_index for d in outcome.pipeline.placement.devices]
        if group.is_leader:
            with open(os.path.join(out, f"case{i}.pkl"), "wb") as f:
                pickle.dump({"losses": [s.loss for s in outcome.steps], "params": params,
                             "stage_process": stages, "swap_bytes": outcome.swap_counters.get("bytes_out", 0),
                             "offsets": offsets, "offset_errors": errors}, f)
    return 0


def main(argv: list[str]) -> int:
    gc_policy.for_batch_process()     # as `obscura` does
    out, per_process = argv[0], int(argv[1])
    cases = [("llama2-tiny", n, k) for n, k in CASES] + (MP_ZOO_CASES if argv[2:] == ["zoo"] else [])
    spec = process_spec(None, None, None, devices="cpu", devices_per_process=per_process)
    return run_distributed(spec, lambda group: body(group, out, cases, len(CASES)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
