"""The one error type cpbench raises for bad input; the CLI turns it into a one-line message, exit 2."""


class CpbenchInputError(ValueError):
    """Bad user input. The message says what is wrong and what to do, in one line."""
