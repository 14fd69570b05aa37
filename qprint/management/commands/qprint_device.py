"""``manage.py qprint_device create|rotate-token|list|disable|enable|approve|deny``: register and
manage devices.

``create`` and ``rotate-token`` print the device token alone on the last line of their output;
it is shown once (only its hash is stored). ``approve CODE`` and ``deny CODE`` decide an agent's
enrolment by the code it shows (docs/AGENT.md, "Enrolling by code"); the agent, not the
operator, receives the token.
"""

from django.core.management.base import BaseCommand, CommandError

from qprint import api
from qprint.core.errors import QPrintError
from qprint.domain import enrolment
from qprint.management.arguments import refuse_unstorable

#: The throttle's "address" of codes typed here (docs/SECURITY.md): one scope for the shell.
COMMAND_SOURCE = "manage.py"


class Command(BaseCommand):
    help = "Register print-agent devices, rotate their tokens, list, disable or enable them."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", metavar="ACTION")
        actions.required = True
        create = actions.add_parser("create", help="Register a device and print its token.")
        create.add_argument("--description", default="")
        create.add_argument(
            "--kind",
            choices=("agent", "cloudprnt"),
            default="agent",
            help="agent (the default): a print agent connects; cloudprnt: a Star CloudPRNT "
            "printer polls by itself (docs/CLOUDPRNT.md).",
        )
        create.add_argument(
            "--server",
            default="https://<this server>",
            help="The server's address as the printer reaches it (for --kind cloudprnt), "
            "e.g. https://print.example.com.",
        )
        rotate = actions.add_parser("rotate-token", help="Replace the device's token.")
        disable = actions.add_parser("disable", help="Disable a device (it can no longer claim).")
        enable = actions.add_parser("enable", help="Enable a disabled device.")
        for sub in (create, rotate, disable, enable):
            sub.add_argument("--tenant", required=True)
            sub.add_argument("--name", required=True)
        approve = actions.add_parser(
            "approve", help="Approve an agent's enrolment by the code it shows."
        )
        approve.add_argument("code", help="the code the agent shows, e.g. WDJB-MJHT")
        approve.add_argument("--tenant", required=True)
        approve.add_argument("--name", required=True)
        approve.add_argument("--description", default="")
        approve.add_argument(
            "--existing",
            action="store_true",
            help="re-enrol the existing device TENANT/NAME: its token rotates, its old agent "
            "is cut off",
        )
        deny = actions.add_parser("deny", help="Refuse an agent's enrolment by its code.")
        deny.add_argument("code")
        listing = actions.add_parser("list", help="List devices.")
        listing.add_argument("--tenant", help="Only this tenant's devices.")

    def handle(self, *args, action: str, **options):
        refuse_unstorable(options)
        try:
            if action == "create":
                device, token = api.create_device(
                    options["tenant"],
                    options["name"],
                    description=options["description"],
                    kind=options["kind"],
                )
                self.stdout.write(f"Created device {device} (id {device.pk}, kind {device.kind}).")
                if device.kind == "cloudprnt":
                    self._cloudprnt_settings(device, options["server"])
                self.stdout.write("Its token, shown only this once:")
                self.stdout.write(token)
            elif action == "rotate-token":
                device = api.get_device(options["tenant"], options["name"])
                token = api.rotate_device_token(device)
                self.stdout.write(f"Rotated the token of {device}; the old token no longer works.")
                self.stdout.write("The new token, shown only this once:")
                self.stdout.write(token)
            elif action in ("disable", "enable"):
                device = api.get_device(options["tenant"], options["name"])
                device = api.set_device_enabled(device, action == "enable")
                self.stdout.write(
                    f"Device {device} is {'enabled' if device.enabled else 'disabled'}."
                )
            elif action == "approve":
                self._approve(options)
            elif action == "deny":
                enrolment.deny(options["code"], source=COMMAND_SOURCE, actor="manage.py")
                self.stdout.write("Refused the enrolment; its agent is told so.")
            elif action == "list":
                self._list(options.get("tenant"))
        except QPrintError as err:
            raise CommandError(err.message) from err

    def _approve(self, options) -> None:
        existing = (
            api.get_device(options["tenant"], options["name"]) if options["existing"] else None
        )
        approved = enrolment.approve(
            options["code"],
            source=COMMAND_SOURCE,
            actor="manage.py",
            tenant=options["tenant"],
            name=options["name"],
            device=existing,
            description=options["description"],
        )
        host = approved.agent_info.get("hostname", "?")
        verb = "Re-enrolled" if existing else "Enrolled"
        self.stdout.write(
            f"{verb} device {approved.device} for the agent on {host} "
            f"({approved.source_address}); the agent collects its token at its next poll."
        )

    def _cloudprnt_settings(self, device, server: str) -> None:
        """What to type into the printer's CloudPRNT settings (its web page or Star's app)."""
        from django.urls import reverse

        from qprint.core.conf import qprint_settings

        url = server.rstrip("/") + reverse("qprint:cloudprnt")
        self.stdout.write("Type into the printer's CloudPRNT settings:")
        self.stdout.write("  CloudPRNT:               enabled")
        self.stdout.write(f"  Server URL:              {url}")
        self.stdout.write("  Authentication:          HTTP Basic")
        self.stdout.write(f"  User name:               {device.name}")
        self.stdout.write("  Password:                the token below")
        self.stdout.write(
            f"  Polling interval:        {qprint_settings.CLOUDPRNT_POLL_SECONDS:g} seconds"
        )
        self.stdout.write("The printer binds itself to the device at its first poll (its MAC).")

    def _list(self, tenant: str | None) -> None:
        from qprint.models import Device

        tenants = (
            [tenant]
            if tenant
            else list(Device.objects.values_list("tenant", flat=True).distinct().order_by("tenant"))
        )
        rows = [
            ("TENANT", "NAME", "KIND", "ENABLED", "ONLINE", "PAUSED", "NODE", "QUEUED", "LAST SEEN")
        ]
        for t in tenants:
            for d in api.list_devices(t):
                rows.append(
                    (
                        t,
                        d.name,
                        d.kind,
                        "yes" if d.enabled else "no",
                        "yes" if d.online else "no",
                        "yes" if d.paused else "no",
                        d.node or "-",
                        str(d.queue_depth),
                        d.last_seen_at.isoformat(timespec="seconds") if d.last_seen_at else "-",
                    )
                )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write(
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            )
