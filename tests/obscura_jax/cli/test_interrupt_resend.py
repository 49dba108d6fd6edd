"""obscura_jax.cli.interrupt: a Ctrl-C that Python drops (raised inside a callback it
cannot propagate from: a __del__, JAX's gc hook) is sent again and lands."""
import subprocess
import sys

SCRIPT = r"""
import os, signal, sys, time
from obscura_jax.cli import interrupt
interrupt.install()

class Dropper:
    def __del__(self):                    # an exception here is 'ignored' by Python
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)                  # the handler runs here, inside __del__

try:
    Dropper()                             # collected at once: __del__ runs now
    print("dropped once", flush=True)
    for _ in range(6000):                 # 60 s: the re-sent interrupt lands long before
        time.sleep(0.01)
    print("ran on")
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_an_interrupt_dropped_in_a_callback_is_sent_again():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["dropped", "once", "interrupted"], proc.stdout + proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
