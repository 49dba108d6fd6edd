import sys

from obscura_jax.cli import main

sys.exit(main())
