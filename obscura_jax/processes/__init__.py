"""Several processes and hosts on jax.distributed.

    distributed     joining, collectives over the coordination service, how a process ends
    launch          who a process is in a run of several (flags, OBSCURA_* variables)
    supervise       the launcher of --processes N: starts, streams, stops them together
    coordinator     reaching the coordinator before jax.distributed.initialize, bounded
    native_log      C and C++ output of a process of several to its log file
    cross_process   messages between stages of different processes (cross-process device_put)
    watchdog        a heartbeat that stops every process when one dies or hangs
    process_group   a run's processes as the trainer sees them
"""
