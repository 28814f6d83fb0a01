"""Reading a user's JSON file (a model config, an engine's metadata dump) so that no input can hang,
exhaust memory or end in a traceback: one CpbenchInputError line for whatever is wrong with it; and writing
JSON that any reader parses (:func:`dumps`: no bare NaN)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from cpbench.errors import CpbenchInputError

MAX_BYTES = 64 << 20  # far above any config or dump; a larger file is not what the option expects


def read_user_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of a user's file (a byte order mark dropped); ``what`` names it in errors.

    Raises CpbenchInputError (one line) when it is not a regular file (a directory, a FIFO that would
    block, a device that never ends), is larger than :data:`MAX_BYTES`, cannot be read or is not UTF-8.
    """
    p = Path(path)
    try:
        if p.exists() and not p.is_file():
            raise CpbenchInputError(f"{what} {str(p)!r} is not a regular file: give the path of a file")
        if p.stat().st_size > MAX_BYTES:
            raise CpbenchInputError(f"{what} {str(p)!r} is larger than {MAX_BYTES >> 20} MiB: not a file of "
                                    "the kind expected")
        return p.read_text(encoding="utf-8-sig")  # a byte order mark (Windows editors write one) is not an error
    except OSError as e:
        raise CpbenchInputError(f"cannot read {what} {str(p)!r}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CpbenchInputError(f"{what} {str(p)!r} is not UTF-8 text") from None


def loads(text: str, what: str):
    """``json.loads(text)``; raises CpbenchInputError (one line, ``what`` names the source) when it is not
    JSON (naming the line of a text of several), nests too deep for the parser or holds an integer too long
    to convert."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        at = f" (line {e.lineno})" if "\n" in text.strip() else ""
        raise CpbenchInputError(f"{what} is not valid JSON{at}") from None
    except (RecursionError, ValueError) as e:  # nesting too deep; an integer of thousands of digits
        raise CpbenchInputError(f"{what} is not JSON cpbench can read: {type(e).__name__}") from None


def read_json(path: str | Path, what: str):
    """The parsed JSON of ``path``; ``what`` names it in errors (e.g. ``"model config"``, ``"--check"``).

    Raises CpbenchInputError (one line) as :func:`read_user_text` and :func:`loads` do.
    """
    return loads(read_user_text(path, what), f"{what} {str(Path(path))!r}")


def dumps(obj, **kwargs) -> str:
    """``json.dumps(obj, default=str, **kwargs)`` as valid JSON: a NaN or infinite float (a number not measured)
    is written as ``null``, never as the bare ``NaN`` that JSON has no word for (``--json`` output, profile.json,
    explain.json)."""
    return json.dumps(_finite(obj), allow_nan=False, **{"default": str, **kwargs})


def _finite(obj):
    """``obj`` with every non-finite float (in dicts, lists and tuples, at any depth) replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
