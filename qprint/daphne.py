"""The web process of a node: Daphne's own command line, on uvloop's event loop.

    qprint-daphne -b 0.0.0.0 -p 8000 mysite.asgi:application
    python -m qprint.daphne -b 0.0.0.0 -p 8000 mysite.asgi:application

Takes every argument ``daphne`` takes and runs the same server; only the event loop differs:
Daphne makes it when its server module is imported, before it reads its arguments or loads the
application, so the loop policy must be set before that import (:func:`qprint.core.event_loop.
install`). Without uvloop installed it is plain ``daphne``. docs/INSTALL.md says when to use it;
docs/PERFORMANCE.md ("The thirty-seventh step") what it saves.
"""

from __future__ import annotations

import sys

from qprint.core import event_loop


def main(argv: list[str] | None = None) -> None:
    event_loop.install()
    from daphne.cli import CommandLineInterface  # after the policy: it makes Daphne's loop

    CommandLineInterface().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
