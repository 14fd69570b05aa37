"""Agents that poll the claim instead of waiting for a ``wake`` (the alternative to push).

    python -m tests.bench.poller --url http://127.0.0.1:PORT/qprint/ --tokens-file F --interval 1

Each device keeps its socket open (the claim gate needs a live, ready connection, and it pings on
time) but ignores ``wake``: every ``--interval`` seconds (a random phase per device) it claims,
and while a job is handed out it downloads it and reports RECEIVED, SPOOLED and PRINTED.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import random
import signal
import uuid

import httpx
import websockets


def event(claim_id: str, kind: str) -> dict:
    return {
        "event_id": str(uuid.uuid4()),
        "type": kind,
        "claim_id": claim_id,
        "occurred_at": datetime.datetime.now(datetime.UTC).isoformat(),
    }


async def device(url: str, token: str, interval: float, client: httpx.AsyncClient) -> None:
    ws_url = url.replace("http://", "ws://") + "ws/device/"
    headers = {"Authorization": f"Bearer {token}"}
    async with websockets.connect(
        ws_url, subprotocols=["qprint.v1"], additional_headers=headers, ping_interval=None
    ) as ws:
        hello = json.loads(await ws.recv())
        state = {"control": hello["control"]["revision"], "settings": hello["settings"]["revision"]}

        async def send_state():
            await ws.send(
                json.dumps(
                    {
                        "type": "state",
                        "control_revision": state["control"],
                        "settings_revision": state["settings"],
                    }
                )
            )

        await send_state()

        async def read():
            async for text in ws:
                frame = json.loads(text)
                if frame["type"] in ("control", "settings"):
                    state[frame["type"]] = frame["revision"]
                    await send_state()

        async def ping():
            while True:
                await asyncio.sleep(float(hello["heartbeat_seconds"]))
                await ws.send('{"type": "ping"}')

        tasks = [asyncio.ensure_future(read()), asyncio.ensure_future(ping())]
        try:
            await asyncio.sleep(random.uniform(0, interval))
            while True:
                while True:
                    r = await client.post(url + "api/v1/device/claim", headers=headers)
                    if r.status_code != 200:
                        break
                    a = r.json()
                    await client.get(
                        url + f"api/v1/device/jobs/{a['job_id']}/document", headers=headers
                    )
                    for kind in ("RECEIVED", "SPOOLED", "PRINTED"):
                        await client.post(
                            url + f"api/v1/device/jobs/{a['job_id']}/events",
                            json=event(a["claim_id"], kind),
                            headers=headers,
                        )
                await asyncio.sleep(interval)
        finally:
            for t in tasks:
                t.cancel()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--tokens-file", required=True)
    parser.add_argument("--interval", type=float, required=True)
    args = parser.parse_args()
    with open(args.tokens_file) as lines:
        tokens = [line.split()[-1] for line in lines if line.strip()]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    limits = httpx.Limits(max_connections=len(tokens), max_keepalive_connections=len(tokens))
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        tasks = [asyncio.ensure_future(device(args.url, t, args.interval, client)) for t in tokens]
        await stop.wait()
        for t in tasks:
            t.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main())
