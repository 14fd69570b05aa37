"""qprint's foundation: pieces with no models and nothing of qprint above them
(docs/ARCHITECTURE.md). The agent may import :mod:`qprint.core.wire` only."""
