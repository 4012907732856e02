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


def test_a_runs_smallest_share_pays_for_waking_the_team():
    # (docs/threads.md) the team's wake cost W, measured once a team size, sets the fewest
    # elements a thread takes: max(32768, 8 a ns of W), and of a band max(4096, 8 a ns of W)
    import numpy as np
    import mshadow as ms
    from mshadow import _core
    n0 = ms.get_num_threads()
    try:
        ms.set_num_threads(1)
        assert _core.thread_shares() == {"wake_us": 0.0, "share": 32768, "band": 4096}
        if not _core.have_openmp():
            return
        ms.set_num_threads(2)
        s = _core.thread_shares()
        wake_ns = round(s["wake_us"] * 1000)
        assert s["wake_us"] > 0
        assert s["share"] == max(32768, 8 * wake_ns) and s["band"] == max(4096, 8 * wake_ns)
        assert _core.thread_shares() == s                    # measured once
        x = ms.new_tensor((3 * s["share"],))                 # a run that takes both threads
        x[:] = 1.5
        y = ms.new_tensor(x.shape)
        y[:] = x * 2 + 1
        np.testing.assert_array_equal(y.numpy(), np.full(x.shape, 4.0, np.float32))
    finally:
        ms.set_num_threads(n0)
