"""What runs a schedule's actions on devices.

    pipeline        a model, a partition, per-stage policies and a Schedule ->
                    compiled stage programs on their devices and their executor
    executor        one training iteration: a worker per device, one issue order
    worker          a device's row of the schedule, issued in order
    stage_program   one stage as compiled programs: F, B, or I and W
    split_program   the split backward's I and W, compiled
    backward_split  the forward + backward jaxpr cut into I and W
    flat_jaxpr      flat jaxprs: calls inlined, checkpoint inputs marked
    weight_grad     what W holds: its inputs held or re-derived, the head at once
    stage_mesh      a stage's devices: one, or data x tensor
    stage_shards    how the programs' bodies see a mesh: per data shard
    placement       which device runs which stage
    transport       activations and gradients between workers
    messages        what travels between stages (from schedules.deps)
    swap            residuals to host memory and back (SO / SI)
"""
