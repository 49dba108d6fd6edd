#!/bin/sh
# Make a profile session's outputs (scripts/device/h200_profile_session.py --out DIR) the
# profiles every figure uses, keep the calibrated ones under raw/, and regenerate every
# committed figure, the doc's tables and the checks, from the repository root:
#
#     sh scripts/device/adopt_h200_profiles.sh DIR          (DIR holds profile_*.json, layer_yardstick.json, ...)
#
# Then read `git diff --stat` and commit (the session folder itself is committed as it is,
# e.g. results/h200/profile_v2/).
set -e
S=${1:?usage: sh scripts/device/adopt_h200_profiles.sh SESSION_DIR}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
for m in llama2-13b gpt3-13b; do
  if [ ! -f "results/h200/raw/profile_$m.calibrated.json" ]; then
    git mv "results/h200/profile_$m.json" "results/h200/raw/profile_$m.calibrated.json"
  fi
  cp "$S/profile_$m.json" "results/h200/profile_$m.json"
done
$PY scripts/figures/check_figures.py --regenerate --jobs "${JOBS:-2}"
$PY scripts/docs/reproduction_tables.py
$PY scripts/figures/check_figures.py --fast
