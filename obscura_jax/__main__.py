"""`python -m obscura_jax` and the `obscura` script. Ctrl-C is handled from the first
line on (obscura_jax.interrupt), before the command line's imports: an import cut short
is an interrupt too, with the same line and exit code (130) as one during a command."""
import os

from obscura_jax import interrupt

interrupt.install()
interrupt.announce_ready()    # only with OBSCURA_TEST_READY_FD (tests)


def _interrupted() -> None:
    """Ctrl-C before the command line's own handling took over (its imports, entry's
    first lines): uncaught there, the interpreter would kill itself silently (-SIGINT)."""
    os.write(2, b"obscura: interrupted\n")
    os._exit(130)


try:
    from obscura_jax.cli import entry
except BaseException:
    if interrupt.requested():     # KeyboardInterrupt, or an import error it caused
        _interrupted()
    raise


def main() -> None:
    try:
        entry()
    except KeyboardInterrupt:
        _interrupted()


if __name__ == "__main__":
    main()
