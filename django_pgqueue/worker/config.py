"""The worker's configuration: the settings' defaults, overridden by command-line options."""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from django_pgqueue import conf
from django_pgqueue.pooler import shown


def default_worker_id() -> str:
    """host:pid:random, unique per process even across container restarts (where
    the host name and pid repeat): 32 random bits make a repeat a one in four
    billion chance, and the worker id's lock (worker/session.py) catches it."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


#: from_settings()'s overrides that stand for a PGQUEUE key, checked by its rule.
_SETTING_OF = {
    "listen": "LISTEN_NOTIFY",
    **{
        name: name.upper()
        for name in (
            *("queues", "concurrency", "prefetch", "lease", "heartbeat_interval"),
            *("poll_interval", "shutdown_timeout", "job_timeout", "reap_interval"),
            *("prune_after", "prune_interval", "channel", "database", "listen_database"),
        )
    },
}


def _checked(name: str, value: Any) -> Any:
    """An override as its setting takes it (a timedelta as seconds, a list of queues
    as a tuple), or ImproperlyConfigured naming it: a string of queues would
    otherwise serve one queue per letter, an empty list every queue."""
    key = _SETTING_OF.get(name)
    if key is None:
        return value
    given = value
    value = conf.normalised(key, value)
    try:
        conf.check_value(key, value)
    except ImproperlyConfigured as exc:
        setting = f"PGQUEUE[{key!r}] = {value!r}"
        raise ImproperlyConfigured(str(exc).replace(setting, f"{name}={given!r}", 1)) from None
    return value


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """Everything one worker process needs to know; see docs/worker.md."""

    worker_id: str
    queues: tuple[str, ...] | None
    concurrency: int
    prefetch: int | str  # "auto": adaptive (worker/prefetch.py)
    lease: float
    heartbeat_interval: float
    poll_interval: float
    shutdown_timeout: float
    job_timeout: float | None
    reap_interval: float
    prune_after: float | None
    prune_interval: float
    listen: bool
    channel: str
    database: str
    #: The alias of the session connection (LISTEN, the worker id's lock); None: database.
    listen_database: str | None = None
    burst: bool = False
    max_jobs: int | None = None
    stats_interval: float = 60.0

    def __post_init__(self) -> None:
        if self.heartbeat_interval >= self.lease:
            raise ImproperlyConfigured(
                f"heartbeat interval {self.heartbeat_interval:g}s must be shorter than the lease "
                f"{self.lease:g}s, or leases expire between renewals"
            )

    @classmethod
    def from_settings(cls, **overrides: Any) -> WorkerConfig:
        """Defaults from ``PGQUEUE``; any override that is not None wins."""
        settings = conf.get()
        overrides = {k: _checked(k, v) for k, v in overrides.items() if v is not None}
        lease = overrides.get("lease") or settings.LEASE
        values: dict[str, Any] = {
            "worker_id": default_worker_id(),
            "queues": settings.QUEUES,
            "concurrency": settings.CONCURRENCY,
            "prefetch": settings.PREFETCH,
            "lease": lease,
            "heartbeat_interval": settings.HEARTBEAT_INTERVAL or lease / 3,
            "poll_interval": settings.POLL_INTERVAL,
            "shutdown_timeout": settings.SHUTDOWN_TIMEOUT,
            "job_timeout": settings.JOB_TIMEOUT,
            "reap_interval": settings.REAP_INTERVAL,
            "prune_after": settings.PRUNE_AFTER,
            "prune_interval": settings.PRUNE_INTERVAL,
            "listen": settings.LISTEN_NOTIFY,
            "channel": settings.CHANNEL,
            "database": conf.database(),
            "listen_database": settings.LISTEN_DATABASE,
        }
        values.update(overrides)
        if values["queues"] is not None:
            values["queues"] = tuple(dict.fromkeys(values["queues"]))  # each once
        return cls(**values)

    def describe(self, *, session: bool = True) -> str:
        """One line for the start banner; ``session=False``: behind a pooler with no
        session, where the worker polls whatever ``listen`` says."""
        queues = ",".join(self.queues) if self.queues else "*"
        listen = (
            "off (no session: polling)"
            if self.listen and not session
            else ("on" if self.listen else "off")
        )
        return (
            f"worker {self.worker_id}: queues={queues} concurrency={self.concurrency} "
            f"prefetch={self.prefetch} "
            f"lease={self.lease:g}s heartbeat={round(self.heartbeat_interval, 3):g}s "
            f"poll={self.poll_interval:g}s listen={listen} "
            f"job_timeout={self.job_timeout or 'none'} "
            f"shutdown_timeout={self.shutdown_timeout:g}s reap={self.reap_interval:g}s "
            f"prune_after={self.prune_after or 'off'} burst={self.burst} "
            f"max_jobs={self.max_jobs or 'unlimited'} database={self.database}"
            + (f" listen_database={shown(self.listen_database)}" if self.listen_database else "")
        )
