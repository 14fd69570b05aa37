"""Reading a ``/metrics`` answer in tests: the samples, parsed by prometheus_client's parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of the one sample ``name`` whose labels include ``labels`` (None: no such one)."""
    found = [v for n, ls, v in samples(text) if n == name and labels.items() <= ls.items()]
    assert len(found) <= 1, f"{len(found)} samples of {name} match {labels}"
    return found[0] if found else None


def names(text: str) -> set[str]:
    """Every metric family name in ``text`` (as PromQL names them: with ``_total`` etc.)."""
    return {n for n, _, _ in samples(text)}
