"""The device socket and the plumbing that makes it realtime across nodes.

- :mod:`~qprint.realtime.session`: the device session, a state machine that does no I/O;
- :mod:`~qprint.realtime.consumer`: the Channels consumer that drives it (reads, writes, schedules);
- :mod:`~qprint.realtime.bus`: this process's sockets and its one channel-layer subscription;
- :mod:`~qprint.realtime.publisher`: the bounded background wakeup publisher;
- :mod:`~qprint.realtime.socket_db`: the threads the socket path runs its statements on;
- :mod:`~qprint.realtime.drain`: the web process's watch on its node's drain.

It calls the domain; the domain never imports it (wakeups reach it through
:mod:`qprint.domain.wakeups`' publisher port).
"""
