"""The event loop of a node's web process and of the agent: uvloop's when it is installed (a
dependency of the wheel on Linux), asyncio's own otherwise, and a node started as the docs start
one (``qprint-daphne``) serves on it."""

import asyncio
import sys
from pathlib import Path

import httpx
import pytest
import uvloop

from qprint.core import event_loop
from tests.processes import listening_node


@pytest.fixture
def policy():
    """The process's loop policy, put back after the test."""
    before = asyncio.get_event_loop_policy()
    yield
    asyncio.set_event_loop_policy(before)


@pytest.fixture
def without_uvloop(monkeypatch):
    """uvloop not installed: its import fails."""
    monkeypatch.setitem(sys.modules, "uvloop", None)


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


def _new_loop_type() -> type:
    loop = asyncio.new_event_loop()
    try:
        return type(loop)
    finally:
        loop.close()


def test_install_makes_new_loops_uvloops(policy):
    assert event_loop.install() is True
    assert _new_loop_type() is uvloop.Loop


def test_install_without_uvloop_changes_nothing(policy, without_uvloop):
    before = asyncio.get_event_loop_policy()
    assert event_loop.install() is False
    assert asyncio.get_event_loop_policy() is before
    assert not issubclass(_new_loop_type(), uvloop.Loop)


def test_run_runs_on_uvloop(policy):
    assert event_loop.run(_loop_type()) is uvloop.Loop
    assert not isinstance(asyncio.get_event_loop_policy(), uvloop.EventLoopPolicy)  # untouched


def test_run_without_uvloop_runs_on_asyncios_loop(without_uvloop):
    loop_type = event_loop.run(_loop_type())
    assert issubclass(loop_type, asyncio.BaseEventLoop)
    assert not issubclass(loop_type, uvloop.Loop)


@pytest.mark.slow
@pytest.mark.services
def test_qprint_daphne_serves_on_uvloop(subprocess_env):
    """``python -m qprint.daphne`` (the ``qprint-daphne`` script) is Daphne with its arguments, on
    uvloop's loop: the node answers, with uvloop's loop module loaded in it."""
    with listening_node("uvloop", {**subprocess_env, "QQQ_NODE_ID": "uvloop"}) as (url, node):
        assert "qprint.daphne" in Path(f"/proc/{node.pid}/cmdline").read_text()
        answer = httpx.get(url + "/qcluster/health/", timeout=30)
        assert answer.status_code in (200, 503), answer.text  # Daphne answered, as JSON
        assert "status" in answer.json()
        maps = Path(f"/proc/{node.pid}/maps").read_text()
        assert "uvloop/loop.cpython" in maps, "the node runs without uvloop"
