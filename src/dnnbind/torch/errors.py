"""Errors in a torch user's words: the high-level ops name their arrays (x, w, gamma, weights[0][1]);
the layers rename them to the tensors and arguments of the torch.nn module that was called."""
from __future__ import annotations

import contextlib
import re
from typing import Iterator, Mapping


def rename(message: str, names: Mapping[str, str]) -> str:
    """``message`` with each whole-word occurrence of a key of ``names`` replaced by its value."""
    if not names:
        return message
    keys = sorted(names, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.\[])(" + "|".join(re.escape(k) for k in keys) + r")(?![\w\[])")
    return pattern.sub(lambda m: names[m.group(1)], message)


@contextlib.contextmanager
def torch_argument_names(names: Mapping[str, str]) -> Iterator[None]:
    """Re-raise a ValueError or TypeError from an op with its array names replaced by ``names``."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        if type(exc) not in (ValueError, TypeError):
            raise
        message = rename(str(exc), names)
        if message == str(exc):
            raise
        raise type(exc)(message) from exc
