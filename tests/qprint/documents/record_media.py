"""Record the media lists real printers report, as the agent reports them (``capabilities
["media"]``), into ``tests/qprint/documents/media/``: the fit check is tested against these.

    python -m tests.qprint.documents.record_media

Printers: CUPS's own ``ippeveprinter`` (IPP Everywhere, its default media), the same printer
through a CUPS queue made with ``lpadmin -m everywhere``, a ``cups-pdf`` queue (a PPD's sizes as
CUPS turns them into PWG names), and ``ippeveprinter`` set up as a 4 x 6 in label printer and as
an 80 mm receipt printer (``media-supported`` from an attributes file, as such printers report).
Needs root, CUPS, cups-pdf and cups-ipp-utils (tests/qprint/agent/cups.py and ippeve.py).
"""

import json
import sys
from pathlib import Path

from qprint.agent.ipp import IppClient, describe
from qprint.agent.spoolers import CupsSpooler
from tests.qprint.agent.cups import CupsServer
from tests.qprint.agent.ippeve import IppEvePrinter

HERE = Path(__file__).resolve().parent / "media"

LABEL_ATTRIBUTES = """ATTR text printer-make-and-model "qprint label printer"
ATTR keyword media-supported oe_4x6-label_4x6in,oe_4x4-label_4x4in,na_index-4x6_4x6in
"""
RECEIPT_ATTRIBUTES = """ATTR text printer-make-and-model "qprint receipt printer"
ATTR keyword media-supported roll_max_80x3276.7mm,roll_min_80x25mm,om_80x200mm_80x200mm
"""


class AttributesPrinter(IppEvePrinter):
    """ippeveprinter from an attributes file: it answers Get-Printer-Attributes, not every
    expectation of ipptool's own get-printer-attributes.test."""

    def _answers(self) -> bool:
        try:
            IppClient(self.uri, timeout=2).printer_attributes()
        except Exception:
            return False
        return True


def media_of_printer(uri: str) -> list[str]:
    return describe(IppClient(uri, timeout=10).printer_attributes())[1]["media"]


def save(name: str, source: str, media: list[str]) -> None:
    path = HERE / f"{name}.json"
    path.write_text(json.dumps({"source": source, "media": media}, indent=1) + "\n")
    print(f"{path}: {len(media)} media", file=sys.stderr)


def main() -> None:
    HERE.mkdir(exist_ok=True)
    printers = {
        "ippeveprinter": IppEvePrinter("qprint-media"),
        "ippeveprinter-label": AttributesPrinter("qprint-label", attributes=LABEL_ATTRIBUTES),
        "ippeveprinter-receipt": AttributesPrinter("qprint-receipt", attributes=RECEIPT_ATTRIBUTES),
    }
    cups = CupsServer()
    try:
        for name, printer in printers.items():
            printer.start()
            how = " -a (media-supported as below)" if printer.attributes else ""
            save(name, f"ippeveprinter{how}: Get-Printer-Attributes", media_of_printer(printer.uri))
        cups.start()
        queue = cups.add_queue("EVE", printers["ippeveprinter"].uri)
        _, caps = CupsSpooler(queue=queue, server=cups.server).describe()
        save(
            "cups-everywhere", "CUPS queue (lpadmin -m everywhere) on ippeveprinter", caps["media"]
        )
        _, caps = CupsSpooler(queue=cups.queue, server=cups.server).describe()
        save("cups-pdf", "CUPS queue with the cups-pdf PPD (CUPS-PDF_opt.ppd)", caps["media"])
    finally:
        cups.stop()
        for printer in printers.values():
            printer.stop()


if __name__ == "__main__":
    main()
