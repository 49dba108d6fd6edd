"""One training run: its configuration, the loop, plans, data and checks.

    run_config      RunConfig: everything a run needs, validated once
    trainer         build the pipeline, measure, run the steps, checkpoint
    plan_run        running a planner plan (this model's, or scaled down)
    data            deterministic token batches by (seed, step)
    reference       the same model unpipelined on one device
    checks          the run against the reference (`train --check`)
"""
