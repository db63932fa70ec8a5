"""The operator's night, in a real browser: find the dead job, read why, retry it.

Headless Debian Chromium against pytest-django's live server. Screenshots of the
changelist and of the job page land in ``artifacts/admin/``.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from pytest_django.live_server_helper import LiveServer

from django_pgqueue.models import Job
from tests.integration.test_admin import grant
from tests.testapp.tasks import add, always_fails, flaky, noop

try:
    from selenium.webdriver.chrome.webdriver import WebDriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.wait import WebDriverWait
except ImportError:  # until selenium is a dev dependency everywhere; CI must have it
    if os.environ.get("CI"):
        raise
    pytest.skip("selenium is not installed (pip install 'selenium>=4.20')", allow_module_level=True)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LIST = "/admin/django_pgqueue/job/"
ROOT = Path(__file__).absolute().parents[2]  # see tests/worker/conftest.py


@pytest.fixture
def worker_burst(db_url: str) -> Callable[[], None]:
    """Run ``manage.py runworker --burst`` in a subprocess against the test database.

    The one place the test starts a worker: it runs until nothing is ready and
    none of its jobs is running, then exits.
    """

    def burst() -> None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "django",
                "runworker",
                "--burst",
                "--no-listen",
                "--settings=tests.settings",
                "--verbosity=0",
            ],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": db_url},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    return burst


def settle(burst: Callable[[], None], timeout: float = 30.0) -> None:
    """Bursts until nothing runs or is due within seconds (retries back off 50-200 ms)."""
    deadline = time.monotonic() + timeout
    while (
        Job.objects.running().exists()
        or Job.objects.queued().filter(run_at__lt=timezone.now() + dt.timedelta(seconds=5)).exists()
    ):
        assert time.monotonic() < deadline, "jobs did not settle"
        burst()
        time.sleep(0.25)  # let a failed job's backoff pass before the next burst


def login(browser: WebDriver, server: LiveServer, username: str, password: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{server.url}/admin/login/?next={LIST}")
    browser.find_element(By.NAME, "username").send_keys(username)
    browser.find_element(By.NAME, "password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_for(browser, lambda b: b.find_elements(By.ID, "pgqueue-summary"), "the job list")


def wait_for(browser: WebDriver, condition: Callable[[WebDriver], object], what: str) -> None:
    WebDriverWait(browser, 10).until(condition, message=f"waiting for {what}")


def status_of(browser: WebDriver, job_id: int) -> str:
    row = browser.find_element(
        By.XPATH, f"//table[@id='result_list']//tr[th[@class='field-id']/a[text()='{job_id}']]"
    )
    return str(row.find_element(By.CSS_SELECTOR, "td.field-status_badge").text)


def screenshot(browser: WebDriver, path: Path) -> None:
    """The whole page, not just the first screenful (Chrome DevTools' full-page capture)."""
    width, height = browser.execute_script(
        "const e = document.documentElement; return [e.scrollWidth, e.scrollHeight];"
    )
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))
    assert path.stat().st_size > 10_000, f"{path} looks empty"


def test_operator_finds_reads_and_retries_a_dead_job(
    browser: WebDriver, live_server: LiveServer, artifacts: Path, worker_burst: Callable[[], None]
) -> None:
    User.objects.create_superuser("night", password="night-pw")
    viewer = User.objects.create_user("viewer", password="viewer-pw", is_staff=True)
    grant(viewer, "view_job")
    # Dies after two runs; retried, its third run succeeds (runs are counted in the DB).
    job = flaky.using(max_attempts=2, queue="emails").enqueue("admin-flaky", failures=2)
    always_fails.enqueue("admin-hopeless")
    for n in range(3):
        add.enqueue(n, n)
    noop.using(delay=3600).enqueue("later")
    settle(worker_burst)
    assert Job.objects.get(pk=job.pk).status == "dead"

    login(browser, live_server, "night", "night-pw")
    assert (
        browser.find_element(By.CSS_SELECTOR, "tr.pgqueue-total td[data-stat=dead_last_24h]").text
        == "2"
    )
    screenshot(browser, artifacts / "changelist.png")

    # Filter the dead jobs, open ours and read why it died.
    browser.find_element(By.LINK_TEXT, "Dead").click()
    wait_for(browser, lambda b: "status__exact=dead" in b.current_url, "the dead filter")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")) == 2
    browser.find_element(
        By.XPATH, f"//table[@id='result_list']//th[@class='field-id']/a[text()='{job.pk}']"
    ).click()
    wait_for(browser, lambda b: f"/{job.pk}/change/" in b.current_url, "the job page")
    history = browser.find_element(By.CSS_SELECTOR, ".field-error_history").text
    assert "Traceback (most recent call last)" in history
    assert "RuntimeError: admin-flaky: planned failure 2 of 2" in history
    assert history.count("Attempt ") == 2
    assert not browser.find_elements(By.NAME, "_save")  # read-only
    screenshot(browser, artifacts / "job.png")

    # Back to the dead jobs; retry ours from the list.
    browser.back()
    wait_for(browser, lambda b: b.find_elements(By.ID, "result_list"), "the dead jobs")
    browser.find_element(By.CSS_SELECTOR, f"input[name=_selected_action][value='{job.pk}']").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("retry_jobs")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "ul.messagelist"), "a message")
    assert browser.find_element(By.CSS_SELECTOR, "ul.messagelist li.success").text == (
        "Retried 1 job: queued now, attempts reset."
    )

    browser.get(f"{live_server.url}{LIST}?q={job.pk}")
    assert status_of(browser, job.pk) == "queued"
    worker_burst()
    browser.refresh()
    assert status_of(browser, job.pk) == "done"
    screenshot(browser, artifacts / "changelist-after-retry.png")

    # A view-only operator sees the same list and page, and no action at all.
    login(browser, live_server, "viewer", "viewer-pw")
    assert browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert not browser.find_elements(By.NAME, "action")
    assert not browser.find_elements(By.NAME, "_selected_action")
    browser.get(f"{live_server.url}{LIST}{job.pk}/change/")
    assert (
        "admin-flaky: planned failure 1 of 2"
        in browser.find_element(By.CSS_SELECTOR, ".field-error_history").text
    )
    assert not browser.find_elements(By.NAME, "_save")
    assert not browser.find_elements(By.CSS_SELECTOR, "a.deletelink")


def scrolls_sideways(browser: WebDriver) -> bool:
    """True if the page, or the job list's own scroll box, is wider than it shows."""
    return bool(
        browser.execute_script(
            "const page = document.documentElement;"
            "const list = document.querySelector('#changelist .results');"
            "return page.scrollWidth > window.innerWidth"
            " || (list !== null && list.scrollWidth > list.clientWidth);"
        )
    )


def test_job_page_buttons_dates_and_a_list_that_fits_1400_px(
    browser: WebDriver, live_server: LiveServer, artifacts: Path, worker_burst: Callable[[], None]
) -> None:
    User.objects.create_superuser("night", password="night-pw")
    # A last error of one long unbroken word, the kind that widened the list.
    hopeless = always_fails.using(max_attempts=1).enqueue("x" * 200)
    waiting = noop.using(delay=3600).enqueue()
    settle(worker_burst)
    assert Job.objects.get(pk=hopeless.pk).status == "dead"

    browser.set_window_size(1400, 1000)
    login(browser, live_server, "night", "night-pw")
    row = browser.find_element(
        By.XPATH, f"//table[@id='result_list']//tr[th[@class='field-id']/a[text()='{hopeless.pk}']]"
    )
    assert row.find_element(By.CSS_SELECTOR, "td.field-error_excerpt").text.startswith("ValueError")
    screenshot(browser, artifacts / "changelist-1400.png")
    widths = browser.execute_script(
        "return Array.from(document.querySelectorAll('#result_list thead th'))"
        ".map(th => th.className + ':' + th.getBoundingClientRect().width);"
    )
    assert not scrolls_sideways(browser), f"the job list scrolls sideways at 1,400 px: {widths}"

    # The dead job's page: dates with seconds in one format, and a Retry button.
    browser.set_window_size(1400, 1400)  # tall enough for the screenshot to show the dates
    browser.get(f"{live_server.url}{LIST}{hopeless.pk}/change/")
    timing = browser.find_element(By.CSS_SELECTOR, "fieldset:nth-of-type(2)").text
    moments = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", timing)
    assert len(moments) == 5, timing  # created, run at, started, attempted, done
    assert re.search(
        r"Attempt 1 at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC",
        browser.find_element(By.CSS_SELECTOR, ".field-error_history").text,
    )
    assert not browser.find_elements(By.ID, "pgqueue-cancel")  # a dead job cannot be cancelled
    # The first screenful, buttons and dates: docs/images/admin-job-buttons.png.
    assert browser.get_screenshot_as_file(str(artifacts / "job-buttons.png"))
    browser.find_element(By.NAME, "pgqueue_retry").click()
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "ul.messagelist"), "a message")
    assert browser.find_element(By.CSS_SELECTOR, "ul.messagelist li.success").text == (
        "Retried 1 job: queued now, attempts reset."
    )
    assert f"/{hopeless.pk}/change/" in browser.current_url
    assert "Queued" in browser.find_element(By.CSS_SELECTOR, ".field-status").text
    assert Job.objects.get(pk=hopeless.pk).status == "queued"
    history = browser.find_element(By.CSS_SELECTOR, "a.historylink")
    history.click()
    wait_for(browser, lambda b: "/history/" in b.current_url, "the job's history")
    assert "Retried: queued now, attempts reset." in browser.page_source

    # A waiting job's page: Cancel, with a reason, and Retry (run it now).
    browser.get(f"{live_server.url}{LIST}{waiting.pk}/change/")
    assert browser.find_elements(By.NAME, "pgqueue_retry")
    browser.find_element(By.CSS_SELECTOR, "#pgqueue-cancel input[name=reason]").send_keys(
        "not needed"
    )
    browser.find_element(By.NAME, "pgqueue_cancel").click()
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "ul.messagelist"), "a message")
    assert browser.find_element(By.CSS_SELECTOR, "ul.messagelist li.success").text == (
        "Cancelled 1 job: not needed (by night in the admin)."
    )
    assert Job.objects.get(pk=waiting.pk).last_error == (
        "Cancelled: not needed (by night in the admin)"
    )
    assert not browser.find_elements(By.NAME, "pgqueue_cancel")  # not queued any more
