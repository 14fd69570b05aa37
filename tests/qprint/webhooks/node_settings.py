"""Settings of the Daphne nodes of ``test_wait_nodes``: the example project, with the job
re-read of ``?wait`` made longer than any wait, so only a notice can answer early."""

from example_project.settings import *  # noqa: F403

QPRINT = {**QPRINT, "JOB_WAIT_RECHECK_SECONDS": 60}  # noqa: F405
