"""``manage.py qprint_submit --device N FILE``: queue a file for printing, as host code would."""

import mimetypes
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from qprint import api
from qprint.core import inputs
from qprint.core.errors import QPrintError
from qprint.management.arguments import refuse_unstorable
from qprint.models import Device


class Command(BaseCommand):
    help = "Queue a file for printing on a device (the same path as qprint.api.submit_job)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="The document to print.")
        parser.add_argument("--device", required=True, help="The device's name.")
        parser.add_argument(
            "--tenant", help="The device's tenant (needed when the name exists in several)."
        )
        parser.add_argument("--printer", help="Printer name (default: the device's default).")
        parser.add_argument("--title", help="Job title (default: the file name).")
        parser.add_argument("--content-type", help="Default: guessed from the file name.")
        parser.add_argument("--priority", type=int, default=0)
        parser.add_argument("--copies", type=int, help="Shortcut for options.copies.")
        parser.add_argument("--options", help="Print options as JSON, e.g. '{\"duplex\": true}'.")
        parser.add_argument("--expires-in", type=int, help="Seconds until the job expires.")
        parser.add_argument("--idempotency-key")

    def handle(self, *args, **options):
        refuse_unstorable(options, paths=("file",))
        path = Path(options["file"])
        try:
            content = path.read_bytes()
        except OSError as err:
            raise CommandError(f"Cannot read {path}: {err.strerror}.") from err
        tenant = options["tenant"] or self._tenant_of(options["device"])
        content_type = options["content_type"] or (
            mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        )
        try:
            given = inputs.parse_json("--options", options["options"] or "{}")
            print_options = inputs.json_object("--options", given)
        except QPrintError as err:  # not JSON, nested too deep, or not an object
            raise CommandError(err.message) from err
        if options["copies"] is not None:
            print_options["copies"] = options["copies"]
        extra = {}
        if options["expires_in"] is not None:
            extra["expires_in"] = options["expires_in"]
        try:
            job, created = api.submit_job(
                tenant,
                options["device"],
                content,
                content_type,
                printer=options["printer"],
                title=options["title"] or path.name,
                options=print_options,
                priority=options["priority"],
                idempotency_key=options["idempotency_key"],
                submitted_by="manage.py qprint_submit",
                **extra,
            )
        except QPrintError as err:
            raise CommandError(err.message) from err
        verb = "Queued" if created else "Already queued"
        self.stdout.write(f"{verb} job {job.pk} on {tenant}/{options['device']} ({job.status}).")
        self.stdout.write(str(job.pk))

    def _tenant_of(self, name: str) -> str:
        tenants = list(Device.objects.filter(name=name).values_list("tenant", flat=True)[:2])
        if not tenants:
            raise CommandError(f"No device named {name!r}.")
        if len(tenants) > 1:
            raise CommandError(f"Several tenants have a device named {name!r}; pass --tenant.")
        return tenants[0]
