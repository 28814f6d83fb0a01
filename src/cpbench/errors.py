"""The error type cpbench raises for bad input (the CLI turns it into a one-line message, exit 2) and
its warning type."""


class CpbenchInputError(ValueError):
    """Bad user input. The message says what is wrong and what to do, in one line."""


class CpbenchWarning(UserWarning):
    """Something odd that does not stop the command (e.g. corrupt lines skipped in results.jsonl); the
    CLI prints it as one ``warning:`` line on stderr."""


def one_line(e: BaseException) -> str:
    """``"Type: first line of the message"`` (at most 200 characters of it), for status rows and errors."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200] if text else ''}"


def shorten(text: str, width: int) -> str:
    """``text`` on one line (whitespace runs as one space) in at most ``width`` characters: cut after its last
    whole word that fits, ``…`` marking the cut (a single word longer than ``width`` is cut inside it)."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    cut = text[:width - 1]
    space = cut.rfind(" ")
    if space > 0 and not text[width - 1].isspace():
        cut = cut[:space]
    return cut.rstrip(" ,;:(") + "…"

