"""How many examples a property test draws: `examples(n)` is n under the quick
hypothesis profile (make test, the default) and 10 n under the thorough one (make
test-long), scaled by the loaded profile's max_examples (tests/conftest.py registers
both: 100 and 1000). Read when the test module is imported, after conftest loaded the
profile; `--hypothesis-profile` is applied at pytest's configure, before collection."""
from hypothesis import settings

QUICK_MAX_EXAMPLES = 100


def examples(n: int) -> int:
    return max(1, n * settings().max_examples // QUICK_MAX_EXAMPLES)
