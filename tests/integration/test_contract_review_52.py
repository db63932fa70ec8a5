"""Review of the stop merged after ff55c27: defects reproduced in what it changed."""

from __future__ import annotations

from django.template import Context, Template

from tests.testapp import djtasks


def test_a_tasks_framework_task_passed_to_a_template_renders_as_before() -> None:
    # Django's templates call what is callable; a Task raising TypeError with no
    # argument bound re-raised it, failing the whole page (it rendered before).
    task = djtasks.noop_task
    rendered = Template("{{ t.name }}|{% if t %}yes{% endif %}|{{ t.queue_name }}").render(
        Context({"t": task})
    )
    assert rendered == "noop_task|yes|default"
