"""A tasks module whose own code fails at import (a worker must survive it)."""

raise RuntimeError("settings for the mail provider are missing")
