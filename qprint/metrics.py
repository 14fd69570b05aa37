"""Prometheus text lines of qprint (names prefixed ``qprint_``)."""


def render() -> str:
    return ""
