"""The reference print agent: speaks the device wire protocol (docs/PROTOCOL.md, docs/API.md)
with only the standard library, ``websockets`` and ``httpx``, exactly as a connector on another
platform would.

It never imports Django or the apps' models, so the tests that drive it prove the protocol, not
shared code. Run it with ``python -m qprint.agent --help``.
"""

__version__ = "0.1.0"
