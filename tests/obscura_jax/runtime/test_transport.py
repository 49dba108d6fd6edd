"""Hand-over between stage workers (obscura_jax.runtime.transport, obscura_jax.runtime.worker): the
mailbox waits without spinning and wakes on abort; a failing worker stops the step
with its own error, never a hang."""
import threading
import time

import pytest

from obscura_jax.runtime.transport import Mailbox, StepAborted
from obscura_jax.runtime.worker import run_threads


def test_take_waits_for_put_and_a_key_comes_once():
    box = Mailbox(threading.Event())
    threading.Timer(0.05, lambda: box.put("k", 42)).start()
    assert box.take("k") == 42 and box.keys() == []
    box.put("j", 1)
    with pytest.raises(ValueError, match="delivered twice"):
        box.put("j", 2)


def test_a_failing_thread_wakes_the_waiting_ones_and_its_error_wins():
    abort = threading.Event()
    box = Mailbox(abort)

    def stop():
        abort.set()
        box.wake()

    def fails():
        time.sleep(0.05)
        raise KeyError("the real problem")

    t0 = time.monotonic()
    error = run_threads([lambda: box.take("never"), fails, lambda: box.take("nor this")], stop)
    assert isinstance(error, KeyError) and time.monotonic() - t0 < 60    # unwoken, they would wait forever
    with pytest.raises(StepAborted):
        box.take("after abort")


def test_no_error_returns_none():
    seen = []
    assert run_threads([lambda: seen.append(1), lambda: seen.append(2)], lambda: None) is None
    assert sorted(seen) == [1, 2]


def test_a_thread_that_cannot_be_woken_does_not_hold_the_error_back():
    stuck = threading.Event()
    t0 = time.monotonic()
    error = run_threads([lambda: stuck.wait(300), lambda: 1 / 0], lambda: None, grace=0.2)
    assert isinstance(error, ZeroDivisionError) and time.monotonic() - t0 < 60    # not the stuck one's 300 s
    stuck.set()
