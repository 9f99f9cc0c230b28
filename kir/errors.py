"""Errors shared by every KLineage package.

`KLineageError` and its subclasses are *expected* failures caused by the user's input; the CLI
turns them into a one-line message on stderr and exit code 2. Anything else is a bug.
"""
from __future__ import annotations


class KLineageError(Exception):
    """Base class of errors the CLI reports as one line with exit code 2."""


class BadInputError(KLineageError):
    """The user's input (file, option, query, case name...) cannot be used."""


class ParseError(BadInputError):
    """Source text that does not parse in the requested language. `line` (from 1) is where,
    when the parser says."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class QueryError(BadInputError):
    """An anchor query or precondition that does not parse or cannot be evaluated."""
