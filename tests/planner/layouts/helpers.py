"""One layout's StageCosts, built as the sweep builds them (for the layouts tests)."""
import models
from planner.layouts import Hardware, TrainingState
from planner.layouts.memory import sharded_weight_bytes
from planner.layouts.space import Layout
from planner.layouts.timing import pipeline_costs
from planner.layouts.unit_costs import analytic_units, layout_profile, recompute_ops
from planner.profile import UNIT_KINDS

HW = Hardware()


def pipeline(cfg, seq, mbs, tp, pp, sp, policy, attention, dp, m, state=TrainingState(), hw=HW):
    """(StageCosts, Layout, the unit models) of one layout."""
    layout = Layout(mbs, tp, pp, sp, policy, attention, dp=dp, num_microbatches=m)
    units = analytic_units(cfg, seq, mbs, attention, policy, tp, sp, hw)
    weights = {k: sharded_weight_bytes([k], cfg, tp, dp, state) for k in UNIT_KINDS}
    prof = layout_profile(cfg, seq, mbs, units, weights, hw, layout.label)
    return pipeline_costs(prof, cfg, layout, recompute_ops(policy, cfg.family), hw), layout, units


def llama13():
    return models.get_config("llama2-13b")
