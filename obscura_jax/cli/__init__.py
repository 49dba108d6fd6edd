"""The `obscura` command line.

    main            the parser and the entry point (one module per sub-command)
    commands/       simulate, model-info, profile, plan, train, compare, sweep
    files           the files a command is given or writes, checked before work
    environment     the environment variables read, checked before work
    blame           errors blamed on a user's model module
    interrupt       Ctrl-C (and the line it prints) from the first line on
    gc_policy       the collector's thresholds for a process that compiles
"""
