"""`python -m obscura_jax` and the `obscura` script. Ctrl-C and SIGTERM are handled from
the first line on (obscura_jax.cli.interrupt), before the command line's imports: an import
cut short is an interrupt too, with the same line and exit code (130; 143 for SIGTERM) as
one during a command."""
import os
import sys

from obscura_jax.cli import gc_policy

from obscura_jax.cli import interrupt
gc_policy.for_batch_process()             # before the imports: they allocate too
interrupt.install()
interrupt.note_train_argv(sys.argv[1:])   # a train's Ctrl-C line names its last checkpoint


def _interrupted() -> None:
    """Ctrl-C (or SIGTERM) before the command line's own handling took over (its imports,
    entry's first lines): uncaught there, the interpreter would kill itself silently
    (-SIGINT). Written to sys.stderr's descriptor: in a process of several, C++ code's
    descriptor 2 goes to a log file (obscura_jax.processes.native_log)."""
    os.write(sys.stderr.fileno(), (interrupt.interrupted_line() + "\n").encode())
    os._exit(interrupt.exit_code())


def main() -> None:
    try:
        interrupt.announce_ready()    # only with OBSCURA_TEST_READY_FD (tests): from here on, 130 and one line
        from obscura_jax.cli.main import entry  # lazy: after the handler and inside this try (see above)
        entry()
    except KeyboardInterrupt:
        _interrupted()
    except ImportError:
        if interrupt.requested():     # an import that Ctrl-C cut short
            _interrupted()
        raise


if __name__ == "__main__":
    main()
