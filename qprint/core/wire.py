"""The device socket's wire v1 constants, once (docs/PROTOCOL.md): the subprotocol, the close
codes and the frame types. Imports nothing, so the server (:mod:`qprint.realtime.session`) and the
reference agent (:mod:`qprint.agent.protocol`, which runs without Django) share it.
"""

SUBPROTOCOL = "qprint.v1"

# -- close codes -----------------------------------------------------------------------------------
CLOSE_GOING_AWAY = 1001
CLOSE_SERVER_ERROR = 1011
CLOSE_SERVICE_RESTART = 1012
CLOSE_REPLACED = 4000
CLOSE_DISABLED = 4001
CLOSE_DRAINING = 4003
CLOSE_PROTOCOL_ERROR = 4400
CLOSE_HEARTBEAT_MISSED = 4408

#: A connection silent for this many heartbeat intervals is closed 4408; its lease lasts as long.
HEARTBEAT_MISSED_INTERVALS = 3

# -- frames: server -> device ----------------------------------------------------------------------
HELLO = "hello"
CONTROL = "control"
SETTINGS = "settings"
WAKE = "wake"
COMMAND = "command"
ERROR = "error"
#: Answers to request frames (they repeat its ``request_id``); ``assignment`` is also pushed.
ASSIGNMENT = "assignment"
NOTHING = "nothing"
REFUSED = "refused"
EVENT_RECORDED = "event_recorded"
COMMAND_RECORDED = "command_recorded"
ANSWER_TYPES = frozenset({ASSIGNMENT, NOTHING, REFUSED, EVENT_RECORDED, COMMAND_RECORDED})
#: A claim's answer says whether another job of the device waited behind the one it hands out: in
#: the ``assignment`` frame answering a ``claim`` (true or false), and as this header of the HTTP
#: claim's 200 (``true`` or ``false``). Absent: not said.
MORE_QUEUED = "more_queued"
MORE_QUEUED_HEADER = "Qprint-More-Queued"
#: An assignment's document inline, base64: in a pushed ``assignment`` (up to the ``state``
#: frame's ``push.inline_max_bytes``), and in a claim's answer when the claim asked for it (up to
#: the ``claim`` frame's ``inline_max_bytes``, or this header of the HTTP claim). Absent: download
#: it from ``document_url``. Both are capped by ``QPRINT["INLINE_DOCUMENT_MAX_BYTES"]``.
DOCUMENT_BASE64 = "document_base64"
INLINE_MAX_BYTES = "inline_max_bytes"
INLINE_MAX_HEADER = "Qprint-Inline-Max-Bytes"
#: The most events recorded together: the ``event`` frames a socket takes at once, the events of
#: one HTTP request's list (its 200 answers each, in order, under ``results``).
MAX_EVENTS_TOGETHER = 20
RESULTS = "results"

# -- frames: device -> server ----------------------------------------------------------------------
STATE = "state"
PING = "ping"
PRINTERS = "printers"
CLAIM = "claim"
EVENT = "event"
COMMAND_RESULT = "command_result"

#: Operations a device may send as request frames instead of HTTP requests.
REQUEST_OPERATIONS = (CLAIM, EVENT, COMMAND_RESULT)
#: ``hello.operations``: the request operations, and ``push`` (pushed assignments).
PUSH = "push"
OPERATIONS = (*REQUEST_OPERATIONS, PUSH)
#: Frames a device may send.
CLIENT_FRAMES = frozenset({STATE, PING, PRINTERS, *REQUEST_OPERATIONS})
#: Longest ``request_id`` of a request frame.
MAX_REQUEST_ID = 64
