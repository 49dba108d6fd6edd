"""obscura_jax.checkpoints.pipeline's dropping of a failed Orbax restore's leftovers: exactly
those reports are dropped, every other one still reaches its hook. (A whole resume
past a damaged step, in its own process: commands/test_train.py.)"""
import logging
import sys
import types
import warnings

from obscura_jax.checkpoints import pipeline as checkpoint
def test_only_a_failed_restores_leftovers_are_dropped(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, value, tb: seen.append(("except", str(value))))
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(("unraisable", str(u.exc_value))))
    asyncio_log = logging.getLogger("asyncio")
    filters = list(asyncio_log.filters)
    try:
        with warnings.catch_warnings(record=True) as caught:    # the filters it adds end with the block
            warnings.simplefilter("always")
            checkpoint._drop_restore_leftovers()
            checkpoint._drop_restore_leftovers()    # once a process: not wrapped twice
            sys.excepthook(RuntimeError, RuntimeError("Event loop is closed"), None)
            sys.excepthook(ValueError, ValueError("a real error"), None)
            read = types.SimpleNamespace(__qualname__=checkpoint._READ)
            sys.unraisablehook(types.SimpleNamespace(exc_value=Exception("a read"), object=read))
            sys.unraisablehook(types.SimpleNamespace(exc_value=Exception("another"), object=object()))
            records = [logging.makeLogRecord({"msg": m}) for m in
                       ("Task exception was never retrieved", "_GatheringFuture exception was never retrieved",
                        "something else")]
            assert [all(f.filter(r) for f in asyncio_log.filters) for r in records] == [False, False, True]
            warnings.warn(f"coroutine '{checkpoint._READ}' was never awaited", RuntimeWarning)
            warnings.warn("coroutine 'other' was never awaited", RuntimeWarning)
        assert [str(w.message) for w in caught] == ["coroutine 'other' was never awaited"]
    finally:
        asyncio_log.filters[:] = filters
    assert seen == [("except", "a real error"), ("unraisable", "another")]
