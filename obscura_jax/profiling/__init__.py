"""Measuring on devices what the planner reads: unit profiles, timing, layer benches.

    profiler        per unit kind: forward/backward/I/W times, kept and held bytes
                    (the obscura-profile/1 file planner.profile reads)
    stopwatch       steady-state timing of a jitted program
    layer_bench     one layer's costs for the layout sweep (planner.layouts.measured)

The planner itself imports none of these: it plans from files, without devices.
"""
