"""A pipeline schedule of your own, built in Python: simulate it, draw it, train with
it, and check it against the unpipelined model.

The schedule: 1F1B, except that stage 0 recomputes its whole forward inside each
backward (it is short of memory) and runs EXTRA more warm-up forwards, which moves
them into its forward bubble so the recompute hides (the strawman's idea, paper
section 3), built action by action:

    stage 0  F0 F1 F2 F3 F4 F5 F6 B0 F7 B1 B2 B3 B4 B5 B6 B7    (1F1B: F0 F1 F2 F3 B0 F4 B1 ...)
    stage 1  F0 F1 F2 B0 F3 B1 F4 B2 F5 ...
    stage 3  F0 B0 F1 B1 ...

    python examples/custom_schedule.py [--out DIR]

Exits 0 only if the schedule simulates faster than 1F1B with the same recompute and
the pipelined losses equal the unpipelined model's (rtol 1e-5).
"""
from __future__ import annotations

import argparse
import sys

import obscura_jax
from schedules import Action, Kind, Schedule, StageCosts, StageSpec, generate, simulate, validate
from schedules.formats.gantt import draw_gantts

P, M = 4, 8
EXTRA = 3          # stage 0's warm-up forwards beyond 1F1B's


def row(stage: int) -> list:
    """One stage's order: its warm-up forwards (1F1B: p - s; stage 0: EXTRA more),
    then a backward and the next forward, in turn."""
    warm = min(P - stage + (EXTRA if stage == 0 else 0), M)
    order = [Action(stage, Kind.F, i) for i in range(warm)]
    for i in range(M):
        order.append(Action(stage, Kind.B, i))
        if warm + i < M:
            order.append(Action(stage, Kind.F, warm + i))
    return order


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="figures_out/examples", help="where the Gantt charts go")
    args = ap.parse_args(argv)
    obscura_jax.cpu_devices(P)                  # before any JAX computation

    stages = tuple(StageSpec(tuple(row(s)), ("full",) if s == 0 else ()) for s in range(P))
    mine = Schedule("early-forwards", P, M, stages)
    validate(mine)                              # every F/B once, in order, no deadlock
    costs = StageCosts.uniform(P, fwd=1.0, bwd=2.0, recompute=1.0, act_bytes=1.0, act_bytes_recompute=0.25)
    ref = generate("1f1b", P, M, adjusted=0)    # 1F1B with the same recompute on stage 0
    tl_mine, tl_ref = simulate(mine, costs), simulate(ref, costs)
    faster = tl_mine.makespan < tl_ref.makespan
    print(f"simulated (f=1, b=2, r=1, stage 0 recomputing): 1f1b {tl_ref.makespan:g}, {mine.name} "
          f"{tl_mine.makespan:g} time units; stage 0 holds {tl_ref.stages[0].peak_inflight_microbatches} vs "
          f"{tl_mine.stages[0].peak_inflight_microbatches} micro-batches")
    files = draw_gantts([tl_ref, tl_mine], f"{args.out}/custom_schedule.png", ["1f1b", mine.name])
    print("wrote " + ", ".join(str(f) for f in files))

    run = obscura_jax.RunConfig(model="llama2-tiny", schedule=mine, steps=2, micro_batch_size=2, seq_len=32,
                                cost_reps=1)
    result = obscura_jax.train(run, devices=f"cpu:{P}")
    print(result.report())
    result.gantt(f"{args.out}/custom_schedule_measured.png")
    check = result.check()                      # the unpipelined model on one device, same data
    ok = check["equal"] and check["max_loss_rel_diff"] <= 1e-5
    print(f"losses {result.losses} vs unpipelined {check['reference_losses']}: max rel diff "
          f"{check['max_loss_rel_diff']:.2e} -> {'EQUAL' if ok else 'DIFFERENT'}")
    return 0 if ok and faster else 1


if __name__ == "__main__":
    sys.exit(main())
