"""The least memory limit any plan can meet: answered before a search, so an
infeasible request is refused at once with the floor named."""
from __future__ import annotations

import math

import models
from planner.baselines import minimum_memory
from planner.costs import check_partition
from planner.errors import PlanError
from planner.profile import Profile
from planner.recompute.residuals import exact_unit_kept
from planner.search import Setting
from schedules.sizes import format_bytes, parse_bytes


def smallest_feasible_limit(profile: Profile, num_stages: int, num_microbatches: int, cmb: bool = True,
                            swap: bool = True, reserve=0) -> int:
    """The least memory limit (bytes, reserve included) any plan on the even
    partition fits in: whole-unit recompute and the most swapping on stages 0..k."""
    held = int(parse_bytes(reserve if reserve is not None else 0, "reserve", allow_zero=True, error=PlanError))
    even = check_partition(models.even_partition(profile.num_units, num_stages), profile.num_units)
    need, _ = minimum_memory(Setting(profile, num_microbatches, math.inf, exact_unit_kept(profile)), even, cmb, swap)
    return round_up_limit(need + held)


def round_up_limit(need: float) -> int:
    """The smallest feasible limit as a whole number of bytes, a hair above the
    floor so the integer program's conservative rounding accepts it."""
    return int(math.ceil(need * (1 + 1e-9))) + 4096


def limit_text(need: float) -> str:
    b = round_up_limit(need)
    return f"{format_bytes(b, 2)} ({b} bytes)"
