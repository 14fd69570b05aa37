"""What a submission may carry: the accepted content types and the options its printer can do.

- Content types: ``QPRINT["ACCEPTED_CONTENT_TYPES"]`` (docs/API.md, "Content types"); parameters
  such as ``; charset=utf-8`` are dropped: only the base type is stored and handed to the device.
  The default list adds, to documents CUPS and IPP Everywhere printers take, the raw formats of
  label and receipt printers: ZPL under the names IPP and CUPS use (``application/vnd.zebra-zpl``)
  and those applications send (``application/zpl``, ``application/x-zpl``), EPL, ESC/POS,
  ``application/vnd.cups-raw`` and ``application/octet-stream``.
- Options: checked against the capabilities the device's agent reported for the job's printer
  (its default printer when the job names none), when it reported any. The rules are the agent's
  own (``qprint.agent.options``, pure and free of Django), so the server refuses exactly what the
  agent would fail: a wrong option is answered 422 before anything is queued.
"""

from typing import Any

from django.db.models import JSONField, Subquery

from qprint.agent import options as agent_options
from qprint.core.conf import qprint_settings
from qprint.core.errors import Invalid, UnsupportedContentType
from qprint.models import DevicePrinter


def accepted_content_types() -> frozenset[str]:
    return frozenset(t.lower() for t in qprint_settings.ACCEPTED_CONTENT_TYPES)


def check_content_type(content_type: Any) -> str:
    """The submitted content type's base type (lower case, its parameters dropped: they would
    reach the printer's spooler as options, e.g. ``; copies=500``); 415 unless it is accepted."""
    if not isinstance(content_type, str) or not content_type.strip():
        raise Invalid(message="'content_type' is required.")
    base = content_type.split(";", 1)[0].strip().lower()
    accepted = accepted_content_types()
    if base not in accepted:
        raise UnsupportedContentType(
            message=f"Content type {base!r} is not supported; use one of "
            f"{', '.join(sorted(accepted))}."
        )
    return base


def reported_printer(device_ref: Any, printer: Any | None) -> tuple[Subquery, Subquery]:
    """The name and capabilities the agent reported for ``printer`` (``None``: its default) of the
    device ``device_ref`` (an ``OuterRef``), as subqueries to annotate the submission's own read
    of the device with."""
    # By name, not by the model's ordering (device, name), which joins the device to sort by it.
    printers = DevicePrinter.objects.filter(device=device_ref).order_by("name")
    printers = (
        printers.filter(name=printer) if printer is not None else printers.filter(is_default=True)
    )
    return (
        Subquery(printers.values("name")[:1]),
        Subquery(printers.values("capabilities")[:1], output_field=JSONField()),
    )


def reported_printer_of(device_id: int, printer: str | None) -> tuple[str, dict[str, Any]] | None:
    """The name and capabilities the agent reported for ``printer`` (``None``: its default) of
    the device ``device_id``, read now; ``None`` when it reported no such printer."""
    printers = DevicePrinter.objects.filter(device_id=device_id)
    printers = (
        printers.filter(name=printer) if printer is not None else printers.filter(is_default=True)
    )
    row = printers.values_list("name", "capabilities").first()
    return None if row is None else (row[0], row[1] or {})


def check_options(
    reported: tuple[str, dict[str, Any]] | None, content_type: str, options: dict[str, Any]
) -> None:
    """422 naming the option when the printer's reported capabilities (``reported``: its name and
    capabilities, see :func:`reported_printer`; ``None``: not known) say it cannot do it."""
    try:
        normalized = agent_options.normalize(options)
    except agent_options.OptionError as exc:
        raise Invalid("unsupported_option", f"{exc}.") from None
    if reported is None:
        return  # not known: the agent will refuse what its printer cannot do
    name, capabilities = reported
    try:
        agent_options.check(normalized, capabilities, name)
        agent_options.check_format(content_type, capabilities, name)
    except agent_options.OptionError as exc:
        raise Invalid("unsupported_option", f"{exc}.") from None
