"""Build the wheel and check it ships everything the app needs at run time.

``python -m devtools.check_wheel`` (``make check-wheel``) builds the wheel into a
temporary directory, lists it, and fails unless it contains ``py.typed``, every
migration, the SQL file, and every template and static file of the source tree.
Templates and static files are discovered, so a new one is checked without
editing this script.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "django_pgqueue"
ASSET_DIRS = ("templates", "static")


def required_files() -> set[str]:
    """Paths (inside the wheel) that must be there."""
    source = ROOT / PACKAGE
    required = {f"{PACKAGE}/py.typed", f"{PACKAGE}/sql/queries.sql"}
    required |= {
        f"{PACKAGE}/migrations/{path.name}" for path in (source / "migrations").glob("*.py")
    }
    for folder in ASSET_DIRS:
        required |= {
            path.relative_to(ROOT).as_posix()
            for path in (source / folder).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        }
    return required


def build_wheel(out_dir: Path) -> Path:
    """Build the wheel with pip into out_dir; returns its path."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--wheel-dir",
            str(out_dir),
            str(ROOT),
        ],
        check=True,
    )
    wheels = sorted(out_dir.glob(f"{PACKAGE}-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one wheel in {out_dir}, found {[w.name for w in wheels]}")
    return wheels[0]


def check(wheel: Path, required: set[str]) -> list[str]:
    """Print the wheel's listing; return the required paths it lacks."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    print(f"{wheel.name}: {len(names)} files")
    for name in names:
        print(f"  {name}")
    return sorted(required - set(names))


def main() -> int:
    required = required_files()
    with tempfile.TemporaryDirectory(prefix="check-wheel-") as tmp:
        missing = check(build_wheel(Path(tmp)), required)
    if missing:
        print(f"the wheel lacks {len(missing)} required files:", file=sys.stderr)
        for name in missing:
            print(f"  {name}", file=sys.stderr)
        return 1
    print(f"ok: all {len(required)} required files are in the wheel")
    return 0


if __name__ == "__main__":
    sys.exit(main())
