"""Every script in examples/ has its own test (tests/examples/test_<script>.py) that
runs it as a user would and relies on it checking its own result (it exits non-zero
when the pipelined loss is not the unpipelined one, a plan adjusts nothing, a policy
changes the math, ...). One file per example spreads them over the test workers."""
from tests.examples.helpers import EXAMPLES

HERE = EXAMPLES.parent / "tests" / "examples"


def test_every_example_has_its_test():
    scripts = sorted(p.stem for p in EXAMPLES.glob("*.py"))
    assert scripts == ["custom_model", "custom_schedule", "geglu", "moe", "parallel_block", "policy_experiment",
                       "profile_plan_train"]
    missing = [s for s in scripts if not (HERE / f"test_{s}.py").exists()]
    assert missing == []
