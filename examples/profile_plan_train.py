"""Profile -> plan -> train at tiny scale, from Python: the planner's whole loop on
llama2-tiny and 4 emulated CPU devices.

  1. profile the model on this machine (per-unit and per-op time and bytes),
  2. plan 4 stages under a memory limit below what plain 1F1B needs (so stages are
     adjusted: Obscura's relaxation, per-op recompute, swapping, partition),
  3. train with the plan and check it against the unpipelined model.
The command line does the same: `obscura profile`, `obscura plan`, `obscura train
--plan` (examples/custom_model.py runs them on a model of your own).

    python examples/profile_plan_train.py [--out DIR]

Exits 0 only if the plan fits the limit, its predicted peaks are never below what
the run counts, and the losses equal the unpipelined model's (rtol 1e-5): what holds
for any measured costs. Which plan wins is not checked: it follows this machine's
times (under load, a baseline that adjusts nothing can simulate fastest). A plan
that must adjust stages is made from a committed profile in examples/custom_model.py.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import obscura_jax
from planner import make_plan, plan_search, save_plan, save_profile, smallest_feasible_limit

P, M, SEQ, MB = 4, 4, 32, 2
CMB = ["attn_norm", "mlp_norm", "mlp_act", "mlp_mul", "final_norm"]   # the ops offered for recompute


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="figures_out/examples/tiny_e2e", help="where the profile and plan go")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    obscura_jax.cpu_devices(P)

    run = obscura_jax.profile_model("llama2-tiny", SEQ, MB, reps=1, ops=CMB)
    prof = run.profile
    save_profile(prof, out / "profile.json")
    print(f"profiled {prof.model} in {run.seconds:.1f} s on {prof.device}")

    need_1f1b = max(st.predicted_peak_bytes for st in make_plan(prof, P, M, 10**12, families=False).stages)
    floor = smallest_feasible_limit(prof, P, M)                  # the least any plan needs
    limit = int(floor + 0.3 * (need_1f1b - floor))
    found = plan_search(prof, P, M, limit, profile_path=out / "profile.json")
    plan = found.plan
    save_plan(plan, out / "plan.json")
    print(f"plan under {limit} B (1F1B needs {need_1f1b} B, the least any plan {floor} B): "
          f"{plan.schedule} (from {found.source}), adjusted {list(plan.adjusted_stages)}, "
          f"recompute {[list(st.recompute) for st in plan.stages]}")
    fits = all(st.predicted_peak_bytes <= limit for st in plan.stages)

    result = obscura_jax.train(obscura_jax.RunConfig(plan=str(out / "plan.json"), model="llama2-tiny", steps=2,
                                                     micro_batch_size=MB, seq_len=SEQ, cost_reps=1),
                               devices=f"cpu:{P}")
    print(result.report())
    never_under = all(st["planned_vs_measured_bytes"] >= 0 for st in result.summary["stages"])
    check = result.check()
    ok = fits and never_under and check["equal"]
    print(f"fits the limit: {fits}; adjusted stages {list(plan.adjusted_stages)} ({found.source}); "
          f"predicted peaks never under the run's count: "
          f"{never_under}; losses equal to the unpipelined model: {check['equal']} -> {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
