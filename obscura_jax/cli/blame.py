"""Errors blamed on the code that raised them: a user's model module.

A module the command line imports with `--model-module` (or any module holding a
registered family's unit classes outside this project's own packages) is the
user's code. An exception that is not an ObscuraError would otherwise read as a
bug of this project ("internal error: please report it"); when the innermost frame
of its traceback that lies in such a file is found (through the exception's
causes and contexts too: JAX re-raises errors from inside traced functions), the
command line prints one line naming that file, line and function instead, and
exits 2, as for any bad input:

    obscura: error: model module examples/broken.py raised ValueError at line 41 in __call__: boom

The same holds for a module that calls sys.exit (SystemExit) while it is imported
or called: one line blaming it, exit 2, not a silent exit. A user's family is also
held to the unit contract before it runs (`check_user_model`: model-info, and train
and compare before anything is built): a unit whose output is not [B,T,D] floats, a
head whose loss is not a float scalar, an aux loss that is not a scalar, an op it
registers but never tags, or (model-info) a loss that is not finite on one layer
is one line naming the module (models.info.check_units, check_finite_loss).
"""
from __future__ import annotations

import inspect
import traceback
from pathlib import Path

from models.errors import ModelConfigError
from models.registry import family_names, get_family

_PROJECT = Path(__file__).resolve().parents[2]
_OWN = tuple(str(_PROJECT / pkg) for pkg in ("models", "schedules", "planner", "obscura_jax"))
_user_files: dict[str, str] = {}     # resolved path -> the name to print


def note_user_module(module, shown: str | None = None) -> None:
    """`module` (imported with --model-module) is the user's code."""
    path = getattr(module, "__file__", None)
    if path:
        _user_files[str(Path(path).resolve())] = shown or path


def family_file(family: str, kind: str | None = None) -> str | None:
    """The file (as shown) to blame for a registered family when it is the user's
    code (outside this project's packages), else None: the file of `kind`'s unit
    class when that is the user's, else a --model-module file holding one of its
    unit classes, else any user file holding one."""
    files = user_files()
    fam = get_family(family)
    paths = {}
    for k, _ in fam.units:
        try:
            paths[k] = str(Path(inspect.getsourcefile(fam.unit_class(k))).resolve())
        except (TypeError, OSError, ImportError, AttributeError):
            continue
    if kind in paths and paths[kind] in files:
        return files[paths[kind]]
    for chosen in (_user_files, files):
        found = next((p for p in paths.values() if p in chosen), None)
        if found is not None:
            return files[found]
    return None


def check_user_model(cfg, seq_len: int, micro_batch: int, finite: bool = False) -> None:
    """A user's family held to the unit contract (module docstring); nothing for
    this project's own families."""
    if family_file(cfg.family) is None:
        return
    from models.info import check_finite_loss, check_units  # lazy: tracing loads JAX
    try:
        check_units(cfg, seq_len, micro_batch)
        if finite:
            check_finite_loss(cfg, min(seq_len, 64))
    except ModelConfigError as e:
        raise ModelConfigError(f"model module {family_file(cfg.family, getattr(e, 'kind', None))}: {e}") from None


def exit_line(exc: SystemExit) -> str | None:
    """One line for a sys.exit raised in the user's module, or None when it is not
    theirs."""
    found = user_frame(exc)
    if found is None:
        return None
    _, path, line, func = found
    return (f"model module {path} called sys.exit({exc.code!r}) at line {line} in {func}: a model module must "
            "not end the command")


def user_files() -> dict[str, str]:
    """Every user file: noted modules, and the files of registered families' unit
    classes that lie outside this project's packages."""
    out = dict(_user_files)
    for fam in (get_family(n) for n in family_names()):
        for kind, _ in fam.units:
            try:
                path = str(Path(inspect.getsourcefile(fam.unit_class(kind))).resolve())
            except (TypeError, OSError, ImportError, AttributeError):
                continue
            if not path.startswith(_OWN):
                out.setdefault(path, path)
    return out


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def user_frame(exc: BaseException) -> tuple[BaseException, str, int, str] | None:
    """(the exception raised there, file as shown, line, function) of the innermost
    user-code frame in `exc`'s traceback or those of its causes; None if none."""
    files = user_files()
    if not files:
        return None
    for e in _chain(exc):
        hits = [f for f in traceback.extract_tb(e.__traceback__) if str(Path(f.filename).resolve()) in files]
        if hits:
            f = hits[-1]
            return e, files[str(Path(f.filename).resolve())], f.lineno, f.name
    return None


def blame_line(exc: BaseException) -> str | None:
    """One line blaming the user's module for `exc`, or None when no user frame is in it."""
    found = user_frame(exc)
    if found is None:
        return None
    e, path, line, func = found
    text = str(e).strip().splitlines()
    return (f"model module {path} raised {type(e).__name__} at line {line} in {func}"
            + (f": {text[0]}" if text else ""))
