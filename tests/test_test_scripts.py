"""``make test``'s PostgreSQL helper where PostgreSQL can be neither found nor installed.

Producing that for real needs a machine without PostgreSQL and a user who is not root. As
root, a private mount namespace hides ``/usr/lib/postgresql`` and ``setpriv`` drops to the
``nobody`` user, so the script runs exactly as it would for such a user; elsewhere the test
skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOBODY = "65534"
HIDE_POSTGRES_THEN_RUN_AS_NOBODY = """
set -e
mount --make-rprivate /
if [ -d /usr/lib/postgresql ]; then mount -t tmpfs tmpfs /usr/lib/postgresql; fi
exec setpriv --reuid={uid} --regid={uid} --clear-groups env -i PATH=/usr/bin:/bin HOME=/tmp "$@"
"""


@pytest.mark.skipif(os.geteuid() != 0 or not all(map(shutil.which, ("unshare", "setpriv"))),
                    reason="needs root, unshare and setpriv to act out a user without either")
def test_without_postgresql_or_root_the_start_script_exits_3_saying_what_to_install() -> None:
    with tempfile.TemporaryDirectory() as checkout:  # nobody may not reach ours (mktemp -d)
        Path(checkout).chmod(0o711)  # nobody needs to pass through, nothing more
        script = Path(checkout) / "scripts" / "start-test-postgres"
        script.parent.mkdir(mode=0o711)
        shutil.copy(ROOT / "scripts" / "start-test-postgres", script)
        done = subprocess.run(
            ["unshare", "--mount", "bash", "-c",
             HIDE_POSTGRES_THEN_RUN_AS_NOBODY.format(uid=NOBODY), "bash", "bash", str(script)],
            capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr
    assert "apt-get install postgresql" in done.stderr
    assert done.stdout == ""


def test_make_test_goes_on_without_postgresql_and_says_which_suite_skips() -> None:
    recipe = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=False, env={**os.environ, "MAKEFLAGS": ""})
    assert recipe.returncode == 0, recipe.stderr
    assert "-eq 3" in recipe.stdout, "exit 3 of start-test-postgres must not stop make test"
    assert "PostgreSQL store tests will SKIP" in recipe.stdout
    assert "RECIPELAB_TEST_POSTGRES_URL" in recipe.stdout
