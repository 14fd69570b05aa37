"""Devices as the application steers them: summaries, pause and resume, settings, printers,
enable and disable.

A change a device must learn (a pause, new settings, being disabled) bumps a revision or flag in
one transaction and wakes the device after it commits; the device's socket then reads its row and
tells the agent (docs/REALTIME.md). "Online" is a live connection lease on the database clock
(``Device.objects.with_liveness()``), and the queue depth is ``with_queue_depth()``.
"""

import logging
from typing import Any

from django.db import transaction
from django.db.models import F, QuerySet

from qprint.core import inputs
from qprint.core.conf import qprint_settings
from qprint.core.errors import Invalid, NotFound
from qprint.domain import credentials
from qprint.domain.wakeups import wake_after_commit
from qprint.models import Device, DevicePrinter
from qprint.models.summaries import DeviceSummary

logger = logging.getLogger("qprint.devices")

PRINTER_NAME_MAX_LENGTH = 255
PRINTER_STATUS_MAX_LENGTH = 100


def get_device(tenant: str, name: str) -> Device:
    """The device ``name`` of ``tenant``; :class:`NotFound` (``unknown_device``) otherwise."""
    lookup = inputs.lookup_name("name", name)
    known = lookup and not inputs.no_row_has_tenant(tenant)
    device = Device.objects.filter(tenant=tenant, name=lookup).first() if known else None
    if device is None:
        shown = name if isinstance(name, str) else str(name)
        raise NotFound("unknown_device", f"No device named {shown[:150]!r}.")
    return device


def summaries(tenant: str) -> QuerySet:
    """The tenant's devices by name, read as :meth:`DeviceSummary.of` needs them (liveness and
    queue depth judged in SQL, printers prefetched). Page it with a keyset on ``(name, id)``."""
    if inputs.no_row_has_tenant(tenant):
        return Device.objects.none()
    return Device.objects.filter(tenant=tenant).for_summary().order_by("name", "id")


def list_devices(tenant: str) -> list[DeviceSummary]:
    """Every device of ``tenant``, by name. "online" is a live lease on the database clock."""
    return [DeviceSummary.of(d) for d in summaries(tenant)]


def device_summary(tenant: str, name: str) -> DeviceSummary:
    """One device of ``tenant``; :class:`NotFound` (``unknown_device``) otherwise."""
    looked_up = inputs.lookup_name("name", name)
    device = summaries(tenant).filter(name=looked_up).first() if looked_up else None
    if device is None:
        raise NotFound("unknown_device", f"No device named {name!r}.")
    return DeviceSummary.of(device)


def _set_paused(device: Device | int, paused: bool, reason: str) -> Device:
    device_id = credentials.device_id_of(device)
    with transaction.atomic():
        changed = Device.objects.filter(pk=device_id, paused=not paused).update(
            paused=paused, control_revision=F("control_revision") + 1
        )
        fresh = Device.objects.filter(pk=device_id).first()
        if fresh is None:
            raise NotFound("unknown_device", "No such device.")
        if changed:
            wake_after_commit(fresh.tenant, fresh.pk, reason)
            logger.info(
                "device_%s device=%s control_revision=%s", reason, fresh, fresh.control_revision
            )
    return fresh


def pause_device(device: Device | int) -> Device:
    """Pause the device (bumps ``control_revision``; no-op when already paused)."""
    return _set_paused(device, True, "paused")


def resume_device(device: Device | int) -> Device:
    """Resume the device (bumps ``control_revision``; no-op when not paused)."""
    return _set_paused(device, False, "resumed")


def update_settings(device: Device | int, values: dict[str, Any]) -> Device:
    """Replace the device's settings with ``values`` and bump ``settings_revision``."""
    if not isinstance(values, dict):
        raise Invalid(message="'settings' must be a JSON object.")
    values = inputs.json_object("settings", values, qprint_settings.MAX_SETTINGS_BYTES)
    device_id = credentials.device_id_of(device)
    with transaction.atomic():
        changed = Device.objects.filter(pk=device_id).update(
            settings=values, settings_revision=F("settings_revision") + 1
        )
        if not changed:
            raise NotFound("unknown_device", "No such device.")
        fresh = Device.objects.get(pk=device_id)
        wake_after_commit(fresh.tenant, fresh.pk, "settings")
    logger.info("device_settings device=%s settings_revision=%s", fresh, fresh.settings_revision)
    return fresh


def parse_printers(printers: Any) -> dict[str, dict[str, Any]]:
    """A device's printer list, checked: a list of objects with a non-empty ``name``, and
    optional ``is_default``, ``status`` (string) and ``capabilities`` (object). One entry per
    name (the last one wins). :class:`Invalid` names the first entry at fault."""
    inputs.json_list("printers", printers, qprint_settings.MAX_PRINTERS)
    rows: dict[str, dict[str, Any]] = {}
    for index, item in enumerate(printers):
        field = f"printers[{index}]"
        if not isinstance(item, dict):
            raise Invalid(message=f"'{field}' must be an object.")
        name = inputs.required_text(f"{field}.name", item.get("name"), PRINTER_NAME_MAX_LENGTH)
        status = inputs.text(f"{field}.status", item.get("status"), PRINTER_STATUS_MAX_LENGTH)
        capabilities = inputs.json_object(
            f"{field}.capabilities", item.get("capabilities"), qprint_settings.MAX_DETAIL_BYTES
        )
        is_default = item.get("is_default", False)
        if not isinstance(is_default, bool) and is_default is not None:
            raise Invalid(message=f"'{field}.is_default' must be true or false.")
        rows[name] = {
            "name": name,
            "is_default": bool(is_default),
            "status": status,
            "capabilities": capabilities,
        }
    return rows


def replace_printers(
    device: Device | int, printers: Any, *, token_hash: str | None = None
) -> list[DevicePrinter]:
    """Replace the device's printer list with ``printers`` (a list of objects with ``name``,
    ``is_default``, ``status``, ``capabilities``). ``token_hash``: a socket's device, which must
    still hold that token and be enabled (checked under the device's lock, as for a claim)."""
    device_id = credentials.device_id_of(device)
    rows = [
        DevicePrinter(device_id=device_id, **fields) for fields in parse_printers(printers).values()
    ]
    with transaction.atomic():
        locked = (
            Device.objects.select_for_update(no_key=True)
            .filter(pk=device_id)
            .values_list("token_hash", "enabled")
            .first()
        )
        if locked is None:
            raise credentials.no_device(token_hash)
        if token_hash is not None:
            credentials.require_token(*locked, token_hash)
        DevicePrinter.objects.filter(device_id=device_id).delete()
        created = DevicePrinter.objects.bulk_create(rows)
    return created


def keep_printer(
    device_id: int, name: str, status: str, capabilities: dict[str, Any]
) -> DevicePrinter:
    """Record one printer of a device as it is now (a CloudPRNT printer reports itself at each
    poll; the caller writes only what changed). The device's only printer is its default."""
    capabilities = inputs.json_object(
        "capabilities", capabilities, qprint_settings.MAX_DETAIL_BYTES
    )
    printer, _created = DevicePrinter.objects.update_or_create(
        device_id=device_id,
        name=name,
        defaults={
            "status": status[:PRINTER_STATUS_MAX_LENGTH],
            "capabilities": capabilities,
            "is_default": True,
        },
    )
    return printer


def keep_agent_info(device_id: int, info: dict[str, Any]) -> None:
    """Merge what a device said of itself (a CloudPRNT printer: model, firmware, poll interval)
    into its ``agent_info``."""
    with transaction.atomic():
        device = Device.objects.select_for_update(no_key=True).filter(pk=device_id).first()
        if device is None:
            raise NotFound("unknown_device", "No such device.")
        merged = {**(device.agent_info or {}), **info}
        merged = inputs.json_object("agent_info", merged, qprint_settings.MAX_DETAIL_BYTES)
        if merged != device.agent_info:
            Device.objects.filter(pk=device_id).update(agent_info=merged)


def set_device_enabled(device: Device | int, enabled: bool) -> Device:
    """Enable or disable a device. A disabled device cannot claim (403) or connect."""
    device_id = credentials.device_id_of(device)
    with transaction.atomic():
        changed = Device.objects.filter(pk=device_id, enabled=not enabled).update(enabled=enabled)
        fresh = Device.objects.filter(pk=device_id).first()
        if fresh is None:
            raise NotFound("unknown_device", "No such device.")
        if changed:
            wake_after_commit(fresh.tenant, fresh.pk, "enabled" if enabled else "disabled")
            logger.info("device_%s device=%s", "enabled" if enabled else "disabled", fresh)
    return fresh


def disable_device(device: Device | int) -> Device:
    return set_device_enabled(device, False)


def enable_device(device: Device | int) -> Device:
    return set_device_enabled(device, True)
