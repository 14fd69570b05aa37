"""Find the PostgreSQL and Redis the suite runs against.

Order: ``DATABASE_URL``/``REDIS_URL`` from the environment; else testcontainers where a Docker
engine answers; else none, and the tests marked ``services`` are skipped with the reason (or, under
``QPRINT_REQUIRE_SERVICES=1``, the run fails).
"""

import atexit
import os
from dataclasses import dataclass, field


@dataclass
class Services:
    database_url: str | None = None
    redis_url: str | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def postgres(self) -> bool:
        return bool(self.database_url and self.database_url.startswith(("postgres", "pgsql")))

    @property
    def complete(self) -> bool:
        return self.postgres and bool(self.redis_url)

    @property
    def missing_reason(self) -> str:
        return "; ".join(self.reasons) or "PostgreSQL and Redis are available"


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def _start_containers(services: Services) -> None:
    from testcontainers.postgres import PostgresContainer
    from testcontainers.redis import RedisContainer

    if not services.database_url:
        pg = PostgresContainer("postgres:16-alpine", driver=None)
        pg.start()
        atexit.register(pg.stop)
        services.database_url = pg.get_connection_url()
    if not services.redis_url:
        redis = RedisContainer("redis:7-alpine")
        redis.start()
        atexit.register(redis.stop)
        host, port = redis.get_container_host_ip(), redis.get_exposed_port(6379)
        services.redis_url = f"redis://{host}:{port}/0"


def resolve() -> Services:
    services = Services(
        database_url=os.environ.get("DATABASE_URL") or None,
        redis_url=os.environ.get("REDIS_URL") or None,
    )
    if not (services.database_url and services.redis_url):
        if _docker_answers():
            _start_containers(services)
        else:
            services.reasons.append("no Docker engine for testcontainers")
    if not services.database_url:
        services.reasons.insert(0, "DATABASE_URL is not set")
    elif not services.postgres:
        services.reasons.insert(0, f"DATABASE_URL is not PostgreSQL ({services.database_url})")
    if not services.redis_url:
        services.reasons.insert(0, "REDIS_URL is not set")
    return services


def required() -> bool:
    return os.environ.get("QPRINT_REQUIRE_SERVICES", "") not in ("", "0", "false", "no")
