"""The one registry of schedule generators, and `generate` (validated output).

Every generator is a pure function
    gen(num_stages, num_microbatches, *, adjusted, recompute, swap_blocks,
        swap_fraction, costs=None, **extra) -> Schedule
and each module's docstring shows its order for p=4, m=8. `num_stages` is the
pipeline depth p, the number of devices; a generator that puts several model
stages on a device (CHUNKED: interleaved, interleaved-zb, looped-bfs, V per device;
V_SHAPED: zb-v, v-half, v-min, 2 in a V) builds p*V model stages (`model_stages`
says how many), and `adjusted` and costs refer to those.
"""
from __future__ import annotations

from schedules.bounds import MAX_MICROBATCHES, MAX_PAIRS, MAX_STAGES, check_pipeline_size  # noqa: F401 (re-exported)
from schedules.errors import ScheduleError
from schedules.generators.gpipe import gpipe
from schedules.generators.interleaved import interleaved
from schedules.generators.interleaved_zb import interleaved_zb
from schedules.generators.looped_bfs import looped_bfs
from schedules.generators.obscura import obscura
from schedules.generators.obscura_on import obscura_interleaved, obscura_interleaved_zb, obscura_zb_h1
from schedules.generators.one_f_one_b import one_f_one_b, recomp
from schedules.generators.strawman import strawman
from schedules.generators.v_shape import v_half, v_min
from schedules.generators.zero_bubble import zb_h1, zb_h1_capped, zb_h2, zb_v
from schedules.generators.zero_bubble_auto import zb_1p, zb_2p, zb_auto
from schedules.ir import Schedule
from schedules.validator import validate

SCHEDULES = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "recomp": recomp,
    "strawman": strawman,
    "obscura": obscura,
    "interleaved": interleaved,
    "zb-h1": zb_h1,
    "zb-h1-capped": zb_h1_capped,
    "zb-h2": zb_h2,
    "zb-1p": zb_1p,
    "zb-2p": zb_2p,
    "zb-auto": zb_auto,
    "zb-v": zb_v,
    "v-half": v_half,
    "v-min": v_min,
    "interleaved-zb": interleaved_zb,
    "looped-bfs": looped_bfs,
    "obscura-interleaved": obscura_interleaved,
    "obscura-zb-h1": obscura_zb_h1,
    "obscura-interleaved-zb": obscura_interleaved_zb,
}
CHUNKED = ("interleaved", "obscura-interleaved", "interleaved-zb", "obscura-interleaved-zb", "looped-bfs")   # take virtual_stages=V
V_SHAPED = ("zb-v", "v-half", "v-min")      # two chunks per device in a V: 2p model stages


def model_stages(name: str, num_stages: int, virtual_stages: int | None = None) -> int:
    """How many model stages `generate(name, num_stages, ...)` builds."""
    if virtual_stages is not None and name not in CHUNKED:
        raise ScheduleError(f"virtual stages apply to {', '.join(CHUNKED)}, not {name!r}")
    if name in CHUNKED:
        return num_stages * (2 if virtual_stages is None else virtual_stages)
    return 2 * num_stages if name in V_SHAPED else num_stages


def generate(name: str, num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",),
             swap_blocks=0, swap_fraction: float = 0.0, **extra) -> Schedule:
    """Build schedule `name` (see SCHEDULES) and validate it.

    adjusted: None | K (stages 0..K recompute) | "all" | a tuple of stage indices.
    None means no recompute for gpipe/1f1b and "all" for recomp/strawman/obscura.
    recompute: what adjusted stages' StageSpec.recompute holds (op or preset names).
    swap_blocks: lambda at the last adjusted stage (earlier ones +1 each) or a
    per-stage tuple; swap_fraction: beta. `extra` is generator-specific (e.g.
    costs=StageCosts, warmup=tuple for 1f1b/recomp/obscura).
    """
    try:
        gen = SCHEDULES[name]
    except (KeyError, TypeError):
        raise ScheduleError(f"unknown schedule {name!r}; valid: {', '.join(SCHEDULES)}") from None
    check_pipeline_size(num_stages, num_microbatches)
    v = extra.get("virtual_stages")
    if isinstance(num_stages, int) and (name in V_SHAPED or name in CHUNKED and (v is None or isinstance(v, int))):
        check_pipeline_size(model_stages(name, num_stages, v), num_microbatches)   # p x V model stages
    try:
        schedule = gen(num_stages, num_microbatches, adjusted=adjusted, recompute=recompute,
                       swap_blocks=swap_blocks, swap_fraction=swap_fraction, **extra)
    except TypeError as e:
        raise ScheduleError(f"schedule {name!r}: {e}") from None
    validate(schedule)
    return schedule
