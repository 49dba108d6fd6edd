"""`python -m obscura_jax` and the `obscura` script. Ctrl-C is handled from the first
line on (obscura_jax.interrupt), before the command line's imports: an import cut short
is an interrupt too."""
from obscura_jax import interrupt

interrupt.install()

from obscura_jax.cli import entry  # noqa: E402  (after the handler, see above)


def main() -> None:
    entry()


if __name__ == "__main__":
    main()
