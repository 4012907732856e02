"""Differential tests of the expression engine against numpy: random expression trees.

Every tree (mshadow.testing.expression_cases) runs at every SIMD level up to the CPU's and
with 1 and 2 threads; each result must match the numpy oracle (bit-exact, or within a
propagated bound where transcendentals are involved) and be bit-identical across runs.
"""
import re
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import mshadow as ms
from mshadow.ops_table import OPS_BY_NAME
from mshadow.testing import (EXT_KINDS, KNOWN_BUGS, OP_SPECS, assert_exact, c_idiv,
                             expression_cases, simd_levels)

settings.register_profile(
    "mshadow-ci", deadline=None, derandomize=True, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large])
CI = settings.get_profile("mshadow-ci")

TREES = {"checked": 0, "runs": 0}
EXT = {"checked": 0, "runs": 0, "with_ext": 0, "leaves": 0, "kinds": set(), "aliased": set()}
LEVELS = simd_levels()


pytestmark = pytest.mark.usefixtures("restore_engine_state")   # (conftest.py)


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


# ---- extension expressions as leaves ---------------------------------------------------------
EXT_EXAMPLES = 1500
_KIND = "|".join(sorted(EXT_KINDS, key=len, reverse=True))
_EXT_LEAF = re.compile(rf"\b({_KIND})\(")
_EXT_OVER_DST = re.compile(rf"\b({_KIND})\([^()]*?\b(?:dst|parent)\b")


def _check_ext(case):
    _check_everywhere(case, count=False)
    EXT["checked"] += 1
    EXT["runs"] += 2 * len(LEVELS)
    # what the final tree holds (its description), not what was tried and rejected
    found = _EXT_LEAF.findall(case.desc)
    EXT["with_ext"] += bool(found)
    EXT["leaves"] += len(found)
    EXT["kinds"] |= set(found)
    EXT["aliased"] |= set(_EXT_OVER_DST.findall(case.desc))


@settings(CI, max_examples=EXT_EXAMPLES)
@given(expression_cases(avoid=KNOWN_BUGS, extensions=True))
def test_random_trees_with_extension_leaves(case):
    """Leaves are also views (broadcast*, repmat, flip, mirror, swapaxis, transpose_axes, crop,
    slice_axis, reshape), gathers (pad, take, choose/fill row element, upsampling_nearest,
    one_hot_encode, range, concat), mask and implicit_dot, over fresh sources in every layout
    or over the destination itself (evaluated through a temporary), under every operator,
    saver, dtype, scalar and tcast; numpy spells each oracle independently; all bit-exact
    where the rest of the tree is."""
    _check_ext(case)


@settings(CI, max_examples=24)
@given(expression_cases(avoid=KNOWN_BUGS, extensions=True, shapes=_LARGE, max_depth=2,
                        max_leaves=4))
def test_random_trees_with_extension_leaves_threaded_path(case):
    """Extension leaves on the OpenMP path (view rows and gather blocks split between two
    threads)."""
    _check_ext(case)


@pytest.mark.parametrize("source", ["flip", "T"])
def test_float16_alias_compound_saver(source):
    """d += flip(d) * 0.3 must equal d += flip(copy of d) * 0.3: the product is a half, the
    saver's sum is rounded once more (numpy's float16 arithmetic)."""
    init = np.random.default_rng(0).uniform(-8, 8, (8, 8)).astype(np.float16)
    f = init
    c = np.float16(0.3)
    d = ms.new_tensor((8, 8), dtype=np.float16)
    d.numpy()[...] = init
    if source == "flip":
        d += ms.flip(d, 0) * 0.3
        want = (f + f[::-1] * c).astype(np.float16)
    else:
        d += d.T * 0.3
        want = (f + f.T * c).astype(np.float16)
    fresh = ms.from_numpy(init.copy())
    fresh += (ms.flip(ms.from_numpy(init.copy()), 0) if source == "flip"
              else ms.from_numpy(init.T.copy())) * 0.3
    assert_exact(fresh.numpy(), want, "without aliasing")    # holds: one rounding
    assert_exact(d.numpy(), want, "reading the destination")


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
    print(f"random trees with extension leaves checked: {EXT['checked']} "
          f"({EXT['runs']} assignments), {EXT['with_ext']} holding {EXT['leaves']} extension "
          f"leaves; kinds generated {len(EXT['kinds'])} of "
          f"{len(EXT_KINDS)}, read over the destination {len(EXT['aliased'])}: "
          f"{sorted(EXT['aliased'])}")
    if EXT["checked"] >= EXT_EXAMPLES:
        assert EXT["kinds"] == set(EXT_KINDS), set(EXT_KINDS) - EXT["kinds"]
        assert len(EXT["aliased"]) >= 12, EXT["aliased"]
