"""A Star CloudPRNT printer, simulated: what a real printer sends and how it reacts.

Written from Star's CloudPRNT protocol: the printer POSTs its status as JSON every poll interval
(``printerMAC``, ``statusCode`` URL-encoded as firmware sends it, ``printingInProgress``,
``status`` ASB bytes, ``clientAction`` answers to the server's last requests); when the answer says
``jobReady`` it picks the first of the offered ``mediaTypes`` it supports, GETs
``?mac=&type=&token=``, prints, and confirms with ``DELETE ?mac=&code=&token=`` (or the GET form,
``?delete&...``, when the server asks for ``"deleteMethod": "GET"`` or the printer is set to).

The transport is a function ``send(method, params, body, headers) -> Reply`` so the same printer
talks to the Django test client (in-process tests) or to real nodes over HTTP (:func:`over_http`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Send = Callable[[str, dict[str, str], bytes | None, dict[str, str]], Reply]

#: What a Star mC-Print3 answers to the server's ``clientAction`` requests.
SELF_DESCRIPTION = {
    "ClientType": "Star mC-Print3",
    "ClientVersion": "5.1 CPv1.3",
    "Encodings": "image/png; image/jpeg; application/vnd.star.starprnt; text/plain",
    "GetPollInterval": "5",
}


@dataclass
class Printed:
    token: str
    media_type: str
    content: bytes
    headers: dict[str, str]


@dataclass
class StarPrinter:
    send: Send
    name: str
    token: str
    mac: str = "00:11:62:0a:0b:0c"
    #: The media types this printer can print, in its order of preference.
    supports: tuple[str, ...] = (
        "application/vnd.star.starprnt",
        "image/png",
        "image/jpeg",
        "text/plain",
    )
    status_code: str = "200 OK"
    delete_with_get: bool = False
    printed: list[Printed] = field(default_factory=list)
    pending_actions: list[str] = field(default_factory=list)
    last_answer: dict[str, Any] = field(default_factory=dict)

    @property
    def headers(self) -> dict[str, str]:
        credentials = base64.b64encode(f"{self.name}:{self.token}".encode()).decode()
        return {"Authorization": f"Basic {credentials}"}

    def poll_body(self, printing: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {
            "status": "23 6 0 0 0 0 0 0 0 ",
            "printerMAC": self.mac,
            "statusCode": quote(self.status_code),  # firmware URL-encodes it: "200%20OK"
            "printingInProgress": printing,
            "uniqueID": "sim-" + self.mac.replace(":", ""),
        }
        if self.pending_actions:
            body["clientAction"] = [
                {"request": r, "result": SELF_DESCRIPTION.get(r, "")} for r in self.pending_actions
            ]
            self.pending_actions = []
        return body

    def poll_raw(self, printing: bool = False) -> Reply:
        body = json.dumps(self.poll_body(printing)).encode()
        return self.send("POST", {}, body, {**self.headers, "Content-Type": "application/json"})

    def poll(self, printing: bool = False) -> dict[str, Any]:
        reply = self.poll_raw(printing)
        assert reply.status == 200, (reply.status, reply.body[:300])
        answer = reply.json()
        self.last_answer = answer
        self.pending_actions = [a["request"] for a in answer.get("clientAction", [])]
        return answer

    def choose(self, offered: list[str]) -> str | None:
        """The first offered media type this printer supports (the printer's own rule)."""
        for media_type in offered:
            if media_type in self.supports:
                return media_type
        return None

    def fetch(self, token: str | None, media_type: str) -> Reply:
        params = {"mac": self.mac, "type": media_type}
        if token is not None:
            params["token"] = token
        return self.send("GET", params, None, self.headers)

    def confirm(self, token: str | None, code: str = "200 OK") -> Reply:
        params = {"mac": self.mac, "code": code}
        if token is not None:
            params["token"] = token
        if self.delete_with_get:
            return self.send("GET", {"delete": "", **params}, None, self.headers)
        return self.send("DELETE", params, None, self.headers)

    def print_next(self, code: str = "200 OK", *, confirm: bool = True) -> Printed | None:
        """One round as a printer does it: poll; when a job is ready, fetch it, 'print' it and
        confirm it with ``code`` (``confirm=False``: the confirmation is lost)."""
        answer = self.poll()
        if not answer.get("jobReady"):
            return None
        token = answer["jobToken"]
        media_type = self.choose(answer["mediaTypes"])
        assert media_type is not None, f"nothing this printer takes in {answer['mediaTypes']}"
        reply = self.fetch(token, media_type)
        assert reply.status == 200, (reply.status, reply.body[:300])
        job = Printed(token, media_type, reply.body, reply.headers)
        self.printed.append(job)
        if confirm:
            confirmed = self.confirm(token, code)
            assert confirmed.status == 200, (confirmed.status, confirmed.body[:300])
        return job


def over_http(client: Any, url: str) -> Send:
    """A transport over real HTTP (an ``httpx.Client``) to the CloudPRNT URL ``url``."""

    def send(method: str, params: dict[str, str], body: bytes | None, headers: dict[str, str]):
        response = client.request(method, url, params=params, content=body, headers=headers)
        return Reply(response.status_code, dict(response.headers), response.content)

    return send


def over_test_client(client: Any, url: str) -> Send:
    """A transport through Django's test client (in-process tests)."""

    def send(method: str, params: dict[str, str], body: bytes | None, headers: dict[str, str]):
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
        content_type = headers.get("Content-Type", "application/octet-stream")
        extra.pop("HTTP_CONTENT_TYPE", None)
        query = "&".join(f"{k}={quote(v)}" if v else k for k, v in params.items())
        target = f"{url}?{query}" if query else url
        if method == "POST":
            response = client.post(target, data=body or b"", content_type=content_type, **extra)
        else:
            response = client.generic(method, target, **extra)
        return Reply(response.status_code, dict(response.headers), response.content)

    return send
