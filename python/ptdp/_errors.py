"""The errors of the Python API: the command layer's messages, as exceptions."""

from __future__ import annotations


class PtdpError(Exception):
    """A ptdp command failed.

    ``message`` is the message the ``ptdp`` command prints (without its ``ptdp: error:``
    prefix), ``exit_code`` the command's exit code and ``command`` the equivalent command line.
    """

    def __init__(self, message: str, *, exit_code: int = 1, command: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.command = command


class InputError(PtdpError, ValueError):
    """Bad input (exit code 2): the message names the file, line, key or argument and what is
    wrong, word for word as the command line says it."""


class PtdpWarning(UserWarning):
    """What a command says on its standard error besides its result ("ptdp: note: ..." and
    "ptdp: warning: ..." lines: the sequence length chosen for a Hugging Face config, a flag of a
    launch script that is not simulated), issued with Python's ``warnings``."""


class NoPlanError(PtdpError):
    """A search found no valid plan; ``hints`` says what would help."""

    def __init__(self, message: str, *, hints: list[str], command: str = "") -> None:
        super().__init__(message, exit_code=1, command=command)
        self.hints = hints
