"""``manage.py qprint_agent``: the reference agent (``python -m qprint.agent``), same options."""

import sys

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Run the reference print agent; every argument goes to python -m qprint.agent."

    def run_from_argv(self, argv: list[str]) -> None:
        # The agent has its own parser and --help; Django's would reject its options.
        from qprint.agent.__main__ import main

        status = main(argv[2:])
        if status:
            sys.exit(status)

    def handle(self, *args, **options):
        raise CommandError("run it from the command line: manage.py qprint_agent --help")
