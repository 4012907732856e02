"""The OpenMP wait policy mshadow sets at import, and that the user's own setting wins."""
import os
import subprocess
import sys

import pytest

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
    # (docs/threads.md) the team's wake cost W, measured once a team size, sets the bytes a
    # thread's share must move: 96 a ns of W (at least 32768 elements a thread)
    import numpy as np
    import mshadow as ms
    from mshadow import _core
    n0 = ms.get_num_threads()
    try:
        ms.set_num_threads(1)
        one = _core.thread_shares()
        assert one["wake_us"] == 0.0 and one["bytes"] == 0 and one["past_cache_bytes"] == 0
        if not _core.have_openmp():
            return
        ms.set_num_threads(2)
        s = _core.thread_shares()
        assert s["wake_us"] > 0 and s["bytes"] == 96 * round(s["wake_us"] * 1000)
        assert _core.thread_shares() == s                    # measured once
        # a run past the cache: E1's measured rate from there where it is the lower
        W = round(s["wake_us"] * 1000)
        assert s["cache_bytes"] > 0 and 0 < s["past_cache_bytes_a_ns"] <= 96
        assert s["past_cache_bytes"] == s["past_cache_bytes_a_ns"] * W
        small = s["cache_bytes"] // 12
        assert _core.thread_share(small, 12) == max(32768, 96 * W // 12)
        assert _core.thread_share(small + 1, 12) == max(32768, s["past_cache_bytes"] // 12)
        with pytest.raises(ValueError, match="bytes_an_element"):
            _core.thread_share(10, 0)
        n = max(2 * 32768, 2 * s["bytes"] // 12) + 17        # both threads take E1's shares
        w, g = ms.new_tensor((n,), 1.5), ms.new_tensor((n,), 2.0)
        w[:] = -0.5 * (g + 0.25 * w)
        np.testing.assert_array_equal(w.numpy(), np.full(n, -0.5 * (2.0 + 0.375), np.float32))
    finally:
        ms.set_num_threads(n0)
