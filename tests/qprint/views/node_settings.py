"""Settings of the Daphne nodes of ``test_submission_memory``: the example project, with
``MAX_DOCUMENT_BYTES`` from ``QPRINT_TEST_MAX_DOCUMENT_BYTES`` when set (the default otherwise)."""

import os

from example_project.settings import *  # noqa: F403

if os.environ.get("QPRINT_TEST_MAX_DOCUMENT_BYTES"):
    QPRINT = {**QPRINT, "MAX_DOCUMENT_BYTES": int(os.environ["QPRINT_TEST_MAX_DOCUMENT_BYTES"])}  # noqa: F405
