"""What a run did, measured and told: costs, timelines, traces, summaries, tables.

    measure         costs measured on the run's devices, as StageCosts
    events          the measured per-action timeline (through the one list scheduler)
    step_time       the run's one measured number: its median timed step
    summary         a run as one JSON-ready dict (obscura-train/1)
    report          short tables for people
    trace           a measured run as a Perfetto trace; device kernels under jax.profiler
"""
