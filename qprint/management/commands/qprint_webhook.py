"""``manage.py qprint_webhook create|list|delete|test|rotate-secret``: a tenant's webhooks.

``create`` and ``rotate-secret`` print the signing secret alone on the last line of their output;
it is shown once (docs/WEBHOOKS.md).
"""

from django.core.management.base import BaseCommand, CommandError

from qprint.core.errors import QPrintError
from qprint.management.arguments import refuse_unstorable
from qprint.models import WebhookEndpoint
from qprint.webhooks import endpoints


class Command(BaseCommand):
    help = "Create, list, delete, test or rotate the secret of webhook endpoints."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", metavar="ACTION")
        actions.required = True
        create = actions.add_parser("create", help="Create an endpoint and print its secret.")
        create.add_argument("--tenant", required=True)
        create.add_argument("--url", required=True)
        create.add_argument(
            "--event", action="append", dest="events", help="An event type (repeat; none: all)."
        )
        create.add_argument("--description", default="")
        listing = actions.add_parser("list", help="List endpoints (never the secrets).")
        listing.add_argument("--tenant", help="Only this tenant's endpoints.")
        for name, text in (
            ("delete", "Delete an endpoint and its deliveries."),
            ("test", "Queue a webhook.test delivery."),
            ("rotate-secret", "Give the endpoint a new secret (the old one signs 24 h more)."),
        ):
            sub = actions.add_parser(name, help=text)
            sub.add_argument("--tenant", required=True)
            sub.add_argument("--id", required=True, help="The endpoint's id.")

    def handle(self, *args, action: str, **options):
        refuse_unstorable(options)
        try:
            if action == "create":
                endpoint, secret = endpoints.create_endpoint(
                    options["tenant"],
                    options["url"],
                    events=options["events"],
                    description=options["description"],
                )
                self.stdout.write(f"Created webhook {endpoint.pk} -> {endpoint.url}.")
                self.stdout.write("The signing secret, shown only this once:")
                self.stdout.write(secret)
            elif action == "list":
                self._list(options.get("tenant"))
            else:
                endpoint = endpoints.get_endpoint(options["tenant"], options["id"])
                if action == "delete":
                    endpoints.delete_endpoint(endpoint)
                    self.stdout.write(f"Deleted webhook {endpoint.pk}.")
                elif action == "test":
                    delivery = endpoints.send_test(endpoint)
                    self.stdout.write(f"Queued test delivery {delivery.event_id}.")
                else:
                    secret = endpoints.rotate_secret(endpoint)
                    self.stdout.write(
                        f"Rotated the secret of webhook {endpoint.pk}; the previous one signs "
                        f"until {endpoint.previous_secret_expires_at.isoformat()}."
                    )
                    self.stdout.write("The new signing secret, shown only this once:")
                    self.stdout.write(secret)
        except QPrintError as err:
            raise CommandError(err.message) from err

    def _list(self, tenant: str | None) -> None:
        rows = [("ID", "TENANT", "URL", "EVENTS", "CREATED")]
        queryset = WebhookEndpoint.objects.order_by("tenant", "created_at")
        if tenant:
            queryset = queryset.filter(tenant=tenant)
        for e in queryset:
            rows.append(
                (
                    str(e.pk),
                    e.tenant,
                    e.url,
                    ",".join(e.events) or "all",
                    e.created_at.isoformat(timespec="seconds"),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write(
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            )
