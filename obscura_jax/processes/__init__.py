"""Several processes and hosts on jax.distributed.

    distributed     joining, collectives over the coordination service, how a process ends
    launch          starting a run on N local processes (or one of a multi-host run)
    cross_process   messages between stages of different processes (cross-process device_put)
    watchdog        a heartbeat that stops every process when one dies or hangs
    process_group   a run's processes as the trainer sees them
"""
