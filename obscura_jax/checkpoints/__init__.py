"""Checkpoints of a training run (Orbax), and the directory that holds them.

    pipeline        per-stage params and optimizer state of one process's pipeline
    packed          several processes' state as one global array
    checkpointer    the checkpointer a run uses: one process's or several's; the resume's restore
    stop            a run that stops at a step's end on SIGTERM, checkpointed
    directory       the run's lock and per-step metrics log beside Orbax's steps
"""
