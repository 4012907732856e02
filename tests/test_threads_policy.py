"""The OpenMP wait policy mshadow sets at import, and that the user's own setting wins."""
import os
import subprocess
import sys

from mshadow.testing import CHILD_CWD, child_env


def _env_after_import(**env):
    base = {k: v for k, v in child_env().items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    base.update(env)
    code = ("import os, mshadow\n"
            "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))")
    out = subprocess.run([sys.executable, "-c", code], env=base, capture_output=True, text=True,
                         check=True, cwd=CHILD_CWD).stdout.split()
    return tuple(None if v == "None" else v for v in out)


def test_passive_by_default():
    assert _env_after_import() == ("PASSIVE", None)


def test_the_users_setting_wins():
    assert _env_after_import(OMP_WAIT_POLICY="ACTIVE") == ("ACTIVE", None)
    assert _env_after_import(GOMP_SPINCOUNT="5000") == (None, "5000")
