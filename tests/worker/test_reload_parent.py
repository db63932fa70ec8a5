"""``runworker --reload``'s parent and a Ctrl-C that lands as it starts a child: the
terminal sends SIGINT to the processes of its foreground group, so a child started a
moment later does not have it (a pending signal is not inherited)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

#: The child: its handlers in, it says so (as the worker's child does), then counts the
#: SIGINTs that reach it: 0 for one (a graceful stop), 130 for two, 7 for none.
CHILD = textwrap.dedent(
    """
    import signal, sys, time
    import django
    django.setup()
    from django_pgqueue.management.reload import _handlers_installed
    got = []
    signal.signal(signal.SIGINT, lambda *_: got.append(1))
    _handlers_installed()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not got:
        time.sleep(0.01)
    time.sleep(0.5)  # a second, passed on late, would come now
    sys.exit({0: 7, 1: 0}.get(len(got), 130))
    """
)

#: The parent, whose child starts with ``kill_before`` or ``kill_after`` its fork.
PARENT = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    import django
    django.setup()
    from django.utils import autoreload
    from django_pgqueue.management import reload
    autoreload.get_child_arguments = lambda: [sys.executable, "-c", sys.argv[1]]
    real = subprocess.Popen
    def popen(*args, **kwargs):
        if sys.argv[2] == "before":  # the child does not exist yet: only we get it
            os.kill(os.getpid(), signal.SIGINT)
            return real(*args, **kwargs)
        child = real(*args, **kwargs)  # both get it, as from a terminal
        os.kill(child.pid, signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        return child
    reload.subprocess.Popen = popen
    sys.exit(reload._reloading_parent())
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_ctrl_c_as_the_child_is_started_stops_it_once(when: str) -> None:
    """Pressed just before the parent forked the child (SIGINT blocked in the parent,
    which then held it only to count it), the Ctrl-C never reached the child: it was
    lost, and the worker ran on."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-c", PARENT, CHILD, when],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done
