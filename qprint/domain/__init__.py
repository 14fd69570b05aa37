"""qprint's domain: the rules of printing, each in the one module that owns it.

Nothing here imports a transport (views, admin, management commands, the realtime package): the
transports call in. See ``docs/ARCHITECTURE.md`` for the map of who owns which rule.
"""
