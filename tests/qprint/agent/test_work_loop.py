"""The agent's claim loop and the ``wake`` frames that come while it runs: which ones make it claim
again. The claims' answers and the jobs' handling are scripted; no server."""

import uuid

import httpx
import pytest

from qprint.agent.config import AgentConfig, DeviceConfig, journal_path
from qprint.agent.device import DeviceAgent
from qprint.agent.spoolers import NullSpooler
from qprint.agent.worker import DONE, RETRY_LATER


def assignment() -> dict:
    return {
        "job_id": str(uuid.uuid4()),
        "claim_id": str(uuid.uuid4()),
        "size": 1,
        "sha256": "0" * 64,
        "document_url": "http://127.0.0.1:9/document",
    }


class ScriptedClaims:
    """The claim's answers in order (an assignment, or None for 204; ``(assignment, more)`` with
    the ``Qprint-More-Queued`` header); ``during`` is called while the claim with that index is
    on its way."""

    def __init__(self, answers: list, during: dict | None = None) -> None:
        self.answers = list(answers)
        self.during = during or {}
        self.sent = 0

    async def claim(self, endpoints) -> httpx.Response:
        index, self.sent = self.sent, self.sent + 1
        if index in self.during:
            self.during[index]()
        answer = self.answers[index]
        if answer is None:
            return httpx.Response(204)
        if isinstance(answer, tuple):
            body, more = answer
            return httpx.Response(200, json=body, headers={"Qprint-More-Queued": more})
        return httpx.Response(200, json=answer)


class ScriptedJobs:
    """Each job handled calls ``during`` (what comes meanwhile) and ends with ``outcome``."""

    def __init__(self, during, outcome: str = DONE) -> None:
        self.during = during
        self.outcome = outcome
        self.handled = 0

    async def handle(self, endpoints, assignment) -> str:
        self.handled += 1
        self.during()
        return self.outcome


@pytest.fixture
async def agent(tmp_path):
    config = AgentConfig(
        urls=["http://127.0.0.1:9"],
        devices=[DeviceConfig("dev", "token", journal_path(tmp_path, "dev"))],
        operations="http",
    )
    agent = DeviceAgent(config, config.devices[0], NullSpooler())
    agent.connected = True
    yield agent
    if agent._retry_handle is not None:
        agent._retry_handle.cancel()
    await agent.http.aclose()


async def test_a_wake_while_a_claimed_job_prints_is_answered_by_the_claim_after_that_job(agent):
    # Two jobs queued: the device is woken while it prints each (a job of its left CLAIMED).
    agent.api = ScriptedClaims([assignment(), assignment(), None])
    agent.jobs = ScriptedJobs(during=agent.on_wake_frame)

    await agent._claim_until_empty()

    assert agent.jobs.handled == 2 and agent.api.sent == 3  # both jobs, then the empty claim
    # Nothing left to wake the loop: it does not claim again only to be told the queue is empty.
    assert not agent.wake.is_set()


@pytest.mark.parametrize(
    ("claim", "kept"),
    [
        # It hands out a job: the claim after that job reads what the wake was for.
        (0, False),
        # It finds nothing: the wake may be for a job its read did not see; the loop claims again.
        (1, True),
    ],
    ids=["claim_hands_out_a_job", "claim_finds_nothing"],
)
async def test_a_wake_while_a_claim_is_on_its_way_is_kept_unless_another_claim_follows(
    agent, claim, kept
):
    agent.api = ScriptedClaims([assignment(), None], during={claim: agent.on_wake_frame})
    agent.jobs = ScriptedJobs(during=lambda: None)

    await agent._claim_until_empty()

    assert agent.api.sent == 2
    assert agent.wake.is_set() is kept


async def test_a_wake_while_the_loop_is_idle_makes_it_claim(agent):
    agent.on_wake_frame()
    assert agent.wake.is_set()


@pytest.mark.parametrize("ends", ["job_put_aside", "paused", "disconnected"])
async def test_a_wake_kept_back_during_a_job_is_not_lost_when_the_loop_ends_after_it(agent, ends):
    # The loop does not claim after that job: what wakes it next (the retry timer, the resume,
    # the reconnect) claims, and a wake from then on is kept again.
    agent.api = ScriptedClaims([assignment(), None])

    def meanwhile():
        agent.on_wake_frame()
        if ends == "paused":
            agent.applied.paused = True
        elif ends == "disconnected":
            agent.connected = False

    agent.jobs = ScriptedJobs(meanwhile, RETRY_LATER if ends == "job_put_aside" else DONE)

    await agent._claim_until_empty()

    assert agent.api.sent == 1
    assert (agent._retry_handle is not None) == (ends == "job_put_aside")
    agent.on_wake_frame()
    assert agent.wake.is_set()


async def test_a_job_whose_handling_fails_leaves_the_next_wake_kept(agent):
    agent.api = ScriptedClaims([assignment(), None])

    def failing():
        raise httpx.ConnectError("gone")

    agent.jobs = ScriptedJobs(failing)

    with pytest.raises(httpx.ConnectError):
        await agent._claim_until_empty()

    agent.on_wake_frame()
    assert agent.wake.is_set()


async def test_after_a_job_with_nothing_behind_it_the_loop_claims_no_more(agent):
    agent.api = ScriptedClaims([(assignment(), "true"), (assignment(), "false")])
    agent.jobs = ScriptedJobs(during=lambda: None)

    await agent._claim_until_empty()

    assert agent.jobs.handled == 2 and agent.api.sent == 2  # no claim answered 204
    assert not agent.wake.is_set()


@pytest.mark.parametrize("when", ["claim_on_its_way", "job_printing"])
async def test_a_wake_around_the_last_job_is_kept(agent, when):
    # The claim's read said nothing waited: the wake is for a job submitted after it.
    during = {0: agent.on_wake_frame} if when == "claim_on_its_way" else {}
    agent.api = ScriptedClaims([(assignment(), "false")], during=during)
    agent.jobs = ScriptedJobs(agent.on_wake_frame if when == "job_printing" else lambda: None)

    await agent._claim_until_empty()

    assert agent.api.sent == 1
    assert agent.wake.is_set()


def test_the_hint_reads_the_same_from_a_header_and_from_an_assignment_frame():
    from qprint.agent import protocol as p
    from qprint.agent.operations import Reply

    job = assignment()
    for more, said in ((True, True), (False, False), ("yes", None), (None, None)):
        frame = {"type": "assignment", "request_id": "1", **job}
        if more is not None:
            frame["more_queued"] = more
        status, body, headers = p.answer_of(frame)
        assert (status, body) == (200, job)
        assert p.more_queued(Reply(status, body, headers)) is said
    assert p.more_queued(httpx.Response(200, headers={"Qprint-More-Queued": "false"})) is False
    assert p.more_queued(httpx.Response(200, headers={"Qprint-More-Queued": "TRUE"})) is True
    assert p.more_queued(httpx.Response(200)) is None  # an older server: claim again
