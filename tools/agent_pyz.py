"""Build ``dist/qprint-agent.pyz``: the reference agent as one file (``./dev agent-pyz``).

A zipapp (the standard library's ``zipapp``) of ``qprint.agent`` and the pure-Python
distributions it needs (``websockets``, ``httpx`` and theirs), taken from the environment that
runs this script: the versions the tests ran with. No Django, nothing compiled: websockets' C
speedups are left out (websockets falls back to its pure-Python code), so one file runs on any
machine with Python 3.11 or newer (``python3 qprint-agent.pyz --help``).
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import shutil
import sys
import tempfile
import zipapp
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: sniffio: httpcore looks it up on every request (pyproject.toml says why).
ROOTS = ("websockets", "httpx", "sniffio")
#: The lowest Python the file runs on (tomllib; datetime.UTC).
LOWEST_PYTHON = (3, 11)
#: Files never copied: compiled code (the file stays portable) and caches.
SKIPPED_SUFFIXES = (".so", ".pyd", ".dylib", ".c", ".pyc")

MAIN = f'''"""qprint-agent.pyz: the reference print agent as one file (docs/AGENT.md)."""
import sys

if sys.version_info < {LOWEST_PYTHON!r}:
    sys.exit(
        "qprint-agent needs Python {".".join(map(str, LOWEST_PYTHON))} or newer; this is "
        + sys.version.split()[0]
    )

from qprint.agent.__main__ import main

sys.exit(main())
'''


_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def distributions() -> list[metadata.Distribution]:
    """The roots and every distribution they require, extras left out. A requirement under
    another condition (``python_version < "3.15"``) is taken when it is installed here; one that
    is not installed (``exceptiongroup`` below 3.11) is not needed by a supported Python."""
    seen: dict[str, metadata.Distribution] = {}
    todo: list[tuple[str, bool]] = [(name, False) for name in ROOTS]
    while todo:
        name, conditional = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if conditional:
                continue
            raise
        seen[key] = dist
        for text in dist.requires or []:
            requirement, _, marker = text.partition(";")
            if "extra" in marker:
                continue
            todo.append((_NAME.match(requirement).group(1), bool(marker.strip())))
    return sorted(seen.values(), key=lambda d: d.metadata["Name"].lower())


def _copy_distribution(dist: metadata.Distribution, target: Path) -> None:
    for file in dist.files or []:
        parts = Path(file).parts
        if ".." in parts or "__pycache__" in parts or str(file).endswith(SKIPPED_SUFFIXES):
            continue
        if (
            parts[0].endswith(".dist-info")
            and parts[-1] not in ("METADATA", "LICENSE", "top_level.txt")
            and "licenses" not in parts
        ):
            continue
        if parts[0].endswith((".data", ".egg-info")) or parts[0] == "bin":
            continue
        source = Path(dist.locate_file(file))
        if not source.is_file():
            continue
        destination = target / file
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


#: The modules of ``qprint/core/`` the agent imports: Django-free (``./dev lint`` holds them to it).
AGENT_CORE = ("wire.py", "handoff.py", "event_loop.py", "text.py")


def _copy_agent(target: Path) -> None:
    """``qprint/__init__.py``, ``qprint/agent/`` and the modules of ``qprint/core/`` the agent
    imports (:data:`AGENT_CORE`: the wire's constants, the loop's hand-off to threads, the choice
    of event loop, the text predicates); nothing else of qprint."""
    (target / "qprint").mkdir()
    shutil.copy2(REPO / "qprint" / "__init__.py", target / "qprint" / "__init__.py")
    shutil.copytree(
        REPO / "qprint" / "agent",
        target / "qprint" / "agent",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    (target / "qprint" / "core").mkdir()
    (target / "qprint" / "core" / "__init__.py").write_text("")
    for name in AGENT_CORE:
        shutil.copy2(REPO / "qprint" / "core" / name, target / "qprint" / "core" / name)


def build(output: Path) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="qprint-agent-pyz-") as tmp:
        root = Path(tmp)
        _copy_agent(root)
        for dist in distributions():
            _copy_distribution(dist, root)
        (root / "__main__.py").write_text(MAIN)
        zipapp.create_archive(root, output, interpreter="/usr/bin/env python3", compressed=True)
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(REPO / "dist" / "qprint-agent.pyz"))
    args = parser.parse_args(argv)
    built = build(Path(args.output))
    names = ", ".join(f"{d.metadata['Name']} {d.version}" for d in distributions())
    print(f"{built} ({built.stat().st_size // 1024} KiB): qprint.agent + {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
