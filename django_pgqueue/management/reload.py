"""``runworker --reload``: the worker in a child process that Django's autoreloader
(the one ``runserver`` uses) restarts when code changes (development only), and a
parent that starts it again and passes signals on.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, SystemCheckError
from django.utils import autoreload

from django_pgqueue import registry
from django_pgqueue.management.process import ExitGuard
from django_pgqueue.worker.runner import Worker

logger = logging.getLogger("django_pgqueue")

#: The exit status that makes the reloading parent start the worker again.
RESTART = 3
#: The environment variable naming the pipe on which the reloading child says that
#: its signal handlers are in.
READY_FD = "DJANGO_PGQUEUE_RELOAD_READY_FD"
#: What the child says on that pipe when a SIGINT was waiting for its handlers.
HAD_SIGINT = b"i"


def in_reloading_child() -> bool:
    """Whether this process is ``runworker --reload``'s child (the one that works)."""
    return os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true"


def run_reloading(
    build: Callable[[], Worker],
    checks: Callable[[], Any] | None = None,
    serve: Callable[[Worker], Any] | None = None,
) -> int:
    """``runworker --reload``: a parent process that starts the worker in a child and
    starts it again each time the child exits because code changed.

    In the child: ``checks``, then ``build``; an error there (a NameError in a tasks
    module) is shown, and the child waits for a change. ``serve`` (the metrics
    exporter) runs outside that: a port in use ends the process, as without --reload.

    Django's autoreloader (the one ``runserver`` uses) watches the child's modules.
    On a change the worker gives its running jobs back at once, as on a second
    signal, and the child exits for the parent to start a fresh one. Signals:
    Ctrl-C reaches both processes (the parent leaves it to the child, which starts
    with SIGINT blocked so that one pressed while it starts waits for its handlers),
    SIGTERM to the parent is passed on to the child, held until the child's handlers
    are in (it says so on a pipe); a second of either before then ends the child at
    once; the child stops as a worker does.
    """
    if in_reloading_child():
        return _reloading_child(build, checks, serve)
    return _reloading_parent()


def _reloading_parent() -> int:
    env = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
    lock = threading.RLock()  # a second signal may come inside forward()
    held: list[int] = []  # signals for a child whose handlers are not in yet
    current: list[subprocess.Popen[bytes]] = []  # the child, from its start
    ready: list[subprocess.Popen[bytes]] = []  # the child, once its handlers are in
    ended_by: list[int] = []  # the second signal that ended a child still starting

    def forward(signum: int, frame: FrameType | None) -> None:
        with lock:
            if ready and ready[0].poll() is None:
                if signum != signal.SIGINT:  # Ctrl-C: the terminal sent the child its own
                    ready[0].send_signal(signum)
            elif held and current and current[0].poll() is None:
                # A second: now. Its handlers are not in: SIGTERM's default action ends
                # it (SIGINT it keeps blocked until then).
                ended_by[:] = [signum]
                current[0].send_signal(signal.SIGTERM)
            else:  # SIGTERM's default action would kill it: passed on once it can stop
                held.append(signum)

    def when_ready(child: subprocess.Popen[bytes], pipe: int) -> None:
        said = b""  # the child ended first
        with contextlib.suppress(OSError):
            said = os.read(pipe, 1)
        os.close(pipe)
        with lock:
            if said and current[0] is child:
                ready[:] = [child]
                for signum in held:
                    # Ctrl-C: the child had the terminal's own, unless it was pressed
                    # before the child was started (a pending signal is not inherited).
                    if signum != signal.SIGINT or said != HAD_SIGINT:
                        child.send_signal(signum)
                held.clear()

    # Ctrl-C: the terminal sends SIGINT to the child too, which starts with it blocked
    # (kept pending, not lost) until its handlers are in: held here to count it, and
    # passed on only to a child started after it (which says so when ready).
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        with lock:
            if held:  # signalled between two children: no other is started
                return 128 + held[-1] if len(held) > 1 else 0
            pipe, childs_end = os.pipe()
            os.set_inheritable(childs_end, True)
            env[READY_FD] = str(childs_end)
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:  # the last child's ready[0] has ended: signals are held for this one
                child = subprocess.Popen(autoreload.get_child_arguments(), env=env, close_fds=False)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                os.close(childs_end)
            current[:] = [child]
        threading.Thread(target=when_ready, args=(child, pipe), daemon=True).start()
        status = child.wait()
        if status != RESTART:
            if ended_by and status == -signal.SIGTERM:
                return 128 + ended_by[0]
            return 128 - status if status < 0 else status  # killed by a signal: 128 + its number


def _handlers_installed() -> None:
    """In the reloading child: take the SIGINT it started with blocked (a Ctrl-C in its
    first second waits there), and tell the parent that SIGTERM now stops us cleanly,
    and whether a Ctrl-C reached us (one pressed as we were started did not: the parent
    passes that one on)."""
    had = signal.SIGINT in signal.sigpending()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    with contextlib.suppress(OSError, ValueError):  # ValueError: none, not --reload's child
        fd = int(os.environ.pop(READY_FD, ""))
        os.write(fd, HAD_SIGINT if had else b"!")
        os.close(fd)


def _reloading_child(
    build: Callable[[], Worker],
    checks: Callable[[], Any] | None,
    serve: Callable[[Worker], Any] | None,
) -> int:
    built: list[Worker] = []

    def prepare() -> None:
        if checks is not None:  # the command's system checks, which it left to us
            checks()
        built.append(build())  # refuses a schedule whose task's module fails (E010)

    try:
        # check_errors: the file that raised is watched too, though never imported.
        autoreload.check_errors(prepare)()
    except Exception as exc:
        return _wait_for_a_fix(exc)
    worker = built[0]
    if serve is not None:
        serve(worker)  # closed as the child exits
    guard = ExitGuard(worker)
    guard.install()  # on the main thread, which watches the files below
    _handlers_installed()
    reloader = autoreload.get_reloader()
    changed: list[str] = []

    def code_changed(sender: Any, file_path: Any, **kwargs: Any) -> bool:
        if not changed:
            changed.append(str(file_path))
            worker.stop_reason = f"{file_path} changed: restarting (running jobs are given back)"
            worker.hurry()
        return True  # not Django's immediate exit: the worker stops first, then we restart

    autoreload.file_changed.connect(code_changed, weak=False)
    statuses: list[int] = []

    def start() -> None:
        statuses.append(worker.run())

    def run() -> None:
        try:
            autoreload.check_errors(start)()
        except Exception as exc:
            _report(exc)
        if statuses == [0] or changed or worker.stopping:
            reloader.stop()
            return
        # As runserver does: an error (a NameError in a tasks module) is no reason to
        # stop watching. A change restarts the worker; a signal ends the process.
        logger.error("fix the error above: the worker restarts when a file changes")
        reloader.extra_files.update(_task_module_files())  # one that failed is not imported
        while not worker.stopping:
            worker.waker.wait(3600.0)
        if changed:
            logger.info("%s changed: restarting", changed[0])
        reloader.stop()

    thread = threading.Thread(target=run, name="pgqueue-worker", daemon=True)
    thread.start()
    threading.Thread(
        target=_stop_when_orphaned, args=(worker, thread), name="pgqueue-parent-watch", daemon=True
    ).start()
    logger.info("watching for code changes with %s (runworker --reload)", type(reloader).__name__)
    reloader.run(thread)
    thread.join()
    if changed and guard.signalled is None:
        return RESTART
    return guard.status(statuses[0] if statuses else 1)


def _report(exc: Exception) -> None:
    if isinstance(exc, SystemCheckError | CommandError):
        logger.error("%s", exc)  # what the command prints: no traceback of ours
    else:
        logger.error("the worker could not start", exc_info=exc)


def _wait_for_a_fix(exc: Exception) -> int:
    """The checks or the worker's build failed (a NameError in a tasks module a
    schedule names): say why and watch the files, as runserver does. A change
    restarts the child; a signal, or the parent's end, ends it."""
    _report(exc)
    logger.error("fix the error above: the worker restarts when a file changes")
    reloader = autoreload.get_reloader()
    reloader.extra_files.update(_task_module_files())  # one that failed is not imported
    with contextlib.suppress(Exception):  # and the file that raised (a helper they import)
        autoreload.check_errors(registry.discover)()
    changed: list[str] = []

    def code_changed(sender: Any, file_path: Any, **kwargs: Any) -> bool:
        changed.append(str(file_path))
        reloader.stop()
        return True  # not Django's immediate exit: we say why, then restart

    def stop(signum: int, frame: FrameType | None) -> None:
        reloader.stop()

    def stop_when_orphaned(parent: int) -> None:
        while not reloader.should_stop:
            if os.getppid() != parent:
                reloader.stop()
            time.sleep(0.5)

    autoreload.file_changed.connect(code_changed, weak=False)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _handlers_installed()
    threading.Thread(target=stop_when_orphaned, args=(os.getppid(),), daemon=True).start()
    reloader.run(threading.current_thread())
    if not changed:
        return 1
    logger.info("%s changed: restarting", changed[0])
    return RESTART


def _task_module_files() -> list[Path]:
    """The files of the modules a worker imports for its tasks (each app's ``tasks``,
    ``PGQUEUE["TASK_MODULES"]``): the autoreloader watches only modules imported,
    and one whose import failed is not."""
    try:
        names = registry.task_module_names()
    except ImproperlyConfigured:  # PGQUEUE itself is invalid: the apps' modules only
        names = [f"{app.name}.tasks" for app in apps.get_app_configs()]
    files = []
    for name in names:
        with contextlib.suppress(Exception):  # a package above it is missing, or fails
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin and os.path.exists(spec.origin):
                files.append(Path(spec.origin).resolve())
    return files


def _stop_when_orphaned(worker: Worker, running: threading.Thread) -> None:
    """A reloading child whose parent died (SIGKILL) stops too, giving its jobs back,
    rather than run on with nobody to stop it."""
    parent = os.getppid()
    while running.is_alive():
        if os.getppid() != parent:
            worker.stop_reason = "the reloading parent process is gone: stopping"
            worker.hurry()
            return
        running.join(0.5)
