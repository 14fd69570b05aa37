"""The event loop a qprint process runs on: uvloop's when it is installed, else asyncio's own.

uvloop implements asyncio's event loop on libuv, in C: the loop's turns, its callbacks and timers,
the hand-back from threads (``call_soon_threadsafe``) and its socket transports. A node's and an
agent's work per message is mostly such turns, so a pushed job costs a Daphne node 8 % fewer
instructions on it and an agent 17 % fewer (docs/PERFORMANCE.md, "The thirty-seventh step").
The wheel requires it where it is built (Linux and macOS, CPython); elsewhere, and in the
one-file agent (pure Python), everything runs on asyncio's loop, unchanged.

- :func:`install` before Daphne is imported: Daphne makes its loop with
  ``asyncio.new_event_loop()`` when its server module is imported, so only the loop policy reaches
  it (``qprint-daphne``, :mod:`qprint.daphne`).
- :func:`run` for a process's main coroutine (the agent), as ``asyncio.run`` would.

Standard library only: the agent, which runs without Django, imports it too.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Coroutine
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")


def _uvloop() -> ModuleType | None:
    """The uvloop module when it is installed, else None."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def install() -> bool:
    """Make ``asyncio.new_event_loop()`` return uvloop's loop from now on, in every thread of the
    process (its loop policy); False, and nothing changed, when uvloop is not installed."""
    uvloop = _uvloop()
    if uvloop is None:
        return False
    with warnings.catch_warnings():
        # Python 3.14 deprecates the policies; Daphne's loop can be reached no other way.
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, on uvloop's loop when uvloop is installed."""
    uvloop = _uvloop()
    factory = None if uvloop is None else uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
