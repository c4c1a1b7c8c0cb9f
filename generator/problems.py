"""The generator's known failures: problems in its inputs, reported as messages with exit status 1.

Every error the generator raises for something a maintainer can fix in its inputs (the JSON files
under generator/, the headers, a download) derives from :class:`InputProblem`; the command line
prints its lines instead of a traceback. Anything else that escapes is a bug in the generator.
"""
from __future__ import annotations


class InputProblem(RuntimeError):
    """A problem in the generator's inputs; ``str(exc)`` is the message, one problem per line."""

    def lines(self) -> list[str]:
        """The message's lines, as the command line prints them."""
        return [line for line in str(self).splitlines() if line.strip()] or [type(self).__name__]
