"""``manage.py qprint_appkey create|revoke|list``: application keys for the HTTP API.

``create`` prints the key alone on the last line of its output; it is shown once (only its hash is
stored).
"""

from django.core.management.base import BaseCommand, CommandError

from qprint import api
from qprint.core.errors import QPrintError
from qprint.management.arguments import refuse_unstorable
from qprint.models import ApplicationKey


class Command(BaseCommand):
    help = "Create, revoke or list the application keys of the qprint HTTP API."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", metavar="ACTION")
        actions.required = True
        create = actions.add_parser("create", help="Create a key and print it.")
        revoke = actions.add_parser("revoke", help="Revoke a key; it stops working at once.")
        for sub in (create, revoke):
            sub.add_argument("--tenant", required=True)
            sub.add_argument("--name", required=True)
        listing = actions.add_parser("list", help="List keys (never the secrets).")
        listing.add_argument("--tenant", help="Only this tenant's keys.")
        listing.add_argument("--all", action="store_true", help="Include revoked keys.")

    def handle(self, *args, action: str, **options):
        refuse_unstorable(options)
        try:
            if action == "create":
                key, secret = api.create_application_key(options["tenant"], options["name"])
                self.stdout.write(f"Created application key {key}.")
                self.stdout.write("The key, shown only this once:")
                self.stdout.write(secret)
            elif action == "revoke":
                key = api.revoke_application_key(options["tenant"], options["name"])
                self.stdout.write(f"Revoked application key {key}.")
            elif action == "list":
                self._list(options.get("tenant"), options["all"])
        except QPrintError as err:
            raise CommandError(err.message) from err

    def _list(self, tenant: str | None, include_revoked: bool) -> None:
        keys = ApplicationKey.objects.order_by("tenant", "name", "created_at")
        if tenant:
            keys = keys.filter(tenant=tenant)
        if not include_revoked:
            keys = keys.filter(revoked=False)
        rows = [("TENANT", "NAME", "CREATED", "LAST USED", "REVOKED")]
        for k in keys:
            rows.append(
                (
                    k.tenant,
                    k.name,
                    k.created_at.isoformat(timespec="seconds"),
                    k.last_used_at.isoformat(timespec="seconds") if k.last_used_at else "-",
                    "yes" if k.revoked else "no",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write(
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            )
