"""Sphinx configuration: the Markdown pages in this folder, built with MyST and Furo.

Build with ``make docs`` (``sphinx-build -W --keep-going -b html docs docs/_build/html``):
every warning is an error. The version is read from the package, the one place
it is written (hatch reads the same attribute).
"""

from __future__ import annotations

import sys
from pathlib import Path

import django
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# autodoc imports the models and the manager, which need a configured Django. No
# database is contacted: the alias only has to name PostgreSQL.
settings.configure(
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "docs"}},
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_pgqueue"],
    USE_TZ=True,
)
django.setup()

import django_pgqueue  # noqa: E402  (needs the settings above)

project = "django-pgqueue"
author = "django-pgqueue developers"
copyright = "django-pgqueue developers"
release = django_pgqueue.__version__
version = release

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README.md"]

myst_heading_anchors = 3  # links such as concepts.md#the-job-state-machine
myst_enable_extensions = ["deflist"]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

html_theme = "furo"
html_title = f"django-pgqueue {release}"
html_static_path: list[str] = []
