"""Write results/h200/profile_{llama2-13b,gpt3-13b}.json: the H200-measured profiles
(results/h200/raw/, unit times and bytes measured) with per-op recompute times
calibrated from the H200 stage benchmark (results/h200/stage_mfu.json); see
planner/calibrate.py for why and how. Llama-2 uses its own stage measurement;
GPT-3 (not measured as a stage) takes Llama-2's per-kind recompute/forward ratios.

    python scripts/calibrate_h200_profiles.py [--dir results/h200]
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import models  # noqa: E402  (after the path insert: runnable without installing)
from obscura_jax.cli import run_command  # noqa: E402
from planner.analytic import analytic_profile  # noqa: E402
from planner.calibrate import calibrate_profile, layer_ratios, stage_overheads  # noqa: E402
from planner.profile import load_profile, save_profile  # noqa: E402
from schedules.jsonio import read_json  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="results/h200")
    args = ap.parse_args(argv)
    return run_command("calibrate_h200_profiles", lambda: calibrate(Path(args.dir)))


def calibrate(d: Path) -> int:
    overheads = stage_overheads(read_json(d / "stage_mfu.json", "stage MFU result"))
    out = {}
    for name in ("llama2-13b", "gpt3-13b"):
        measured = load_profile(d / "raw" / f"profile_{name}.measured-v1.json")
        analytic = analytic_profile(models.get_config(name), measured.seq_len, measured.micro_batch, "H200")
        if name == "llama2-13b":
            prof = calibrate_profile(measured, analytic, overheads=overheads,
                                     source="stage_mfu.json none/cmb/mlp/full deltas")
        else:
            prof = calibrate_profile(measured, analytic, ratios=layer_ratios(out["llama2-13b"]),
                                     source="Llama-2-13B stage recompute/forward ratios")
        out[name] = prof
        save_profile(prof, d / f"profile_{name}.json")
        r = layer_ratios(prof)
        print(f"{name}: recompute(full)/forward per unit kind: "
              + ", ".join(f"{k} {v:.2f}" for k, v in r.items())
              + "; per-layer overheads (ms) "
              + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in overheads.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
