"""Differential tests of the expression engine against numpy: random expression trees.

Every tree (mshadow.testing.expression_cases) runs at every SIMD level up to the CPU's and
with 1 and 2 threads; each result must match the numpy oracle (bit-exact, or within a
propagated bound where transcendentals are involved) and be bit-identical across runs.
"""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import mshadow as ms
from mshadow.ops_table import OPS_BY_NAME
from mshadow.testing import (KNOWN_BUGS, OP_SPECS, assert_exact, c_idiv, expression_cases,
                             simd_levels)

settings.register_profile(
    "mshadow-ci", deadline=None, derandomize=True, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large])
CI = settings.get_profile("mshadow-ci")

TREES = {"checked": 0, "runs": 0}
LEVELS = simd_levels()


@pytest.fixture(autouse=True)
def _restore_engine_state():
    level, threads = ms.simd_info()["active"], ms.get_num_threads()
    yield
    ms.set_simd_level(level)
    ms.set_num_threads(threads)


def _check_everywhere(case, count=True):
    """Run ``case`` at every SIMD level x (1, 2) threads; all runs equal and right."""
    first = None
    for level in LEVELS:
        for threads in (1, 2):
            ms.set_simd_level(level)
            ms.set_num_threads(threads)
            caught = case.run()
            got = case.check(f"[{level}, {threads} thread(s)]")
            divz = [w for w in caught if issubclass(w.category, RuntimeWarning)
                    and "division by zero" in str(w.message)]
            if case.int_div_zero:
                assert divz, f"no RuntimeWarning for an integer division by zero: {case.desc}"
            else:
                assert not divz, f"spurious division-by-zero warning: {case.desc}"
            if first is None:
                first = got
            else:
                assert_exact(got, first, f"[{level}, {threads}] differs from [{LEVELS[0]}, 1]")
            TREES["runs"] += count
    TREES["checked"] += count


@settings(CI, max_examples=600)
@given(expression_cases(avoid=KNOWN_BUGS))
def test_random_trees_match_numpy(case):
    _check_everywhere(case)


_LARGE = st.sampled_from([(70001,), (257, 301), (3, 130, 173), (66000, 1)])


@settings(CI, max_examples=24)
@given(expression_cases(avoid=KNOWN_BUGS, shapes=_LARGE, max_depth=3, max_leaves=5))
def test_random_trees_threaded_path(case):
    """More than 2 x 32768 elements: the OpenMP path splits the work between two threads."""
    _check_everywhere(case)


@settings(CI, max_examples=400)
@given(expression_cases())
def test_random_trees_all_features(case):
    """The same generator without steering around the (fixed) bugs it can avoid."""
    _check_everywhere(case)


def test_every_operator_of_the_table_is_generated():
    assert set(OP_SPECS) == set(OPS_BY_NAME), "ops_table gained an operator the trees never use"
    for name, spec in OP_SPECS.items():
        assert spec.arity == OPS_BY_NAME[name].arity, name


def test_integer_division_oracle():
    a = np.array([7, -7, 7, -7, 5, -2 ** 63, -2 ** 63, 2, 1], np.int64)
    b = np.array([2, 2, -2, -2, 0, -1, 3, -2 ** 63, 0], np.int64)
    want = [3, -3, -3, 3, 0, -2 ** 63, -3074457345618258602, 0, 0]
    assert c_idiv(a, b).tolist() == want


def test_ops_table_div_reference_at_int64_min():
    a = np.array([-2 ** 63, 2], np.int64)
    b = np.array([3, -2 ** 63], np.int64)
    assert OPS_BY_NAME["div"].ref(a, b).tolist() == [-3074457345618258602, 0]


def test_zz_count_of_random_trees():
    """Reports how many random trees this run checked (pytest -s shows it)."""
    print(f"\nrandom expression trees checked: {TREES['checked']} "
          f"({TREES['runs']} assignments across SIMD levels {LEVELS} x threads 1, 2)")
    if TREES["checked"]:
        assert TREES["checked"] >= 300
