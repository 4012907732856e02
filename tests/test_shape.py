"""Shape: construction, printing, hashing, the mshadow methods, and convert_layout."""
import numpy as np
import pytest

import mshadow as ms


@pytest.mark.parametrize("args", [(2, 3), ((2, 3),), ([2, 3],), (np.int64(2), np.int32(3))])
def test_construction_forms(args):
    s = ms.Shape(*args)
    assert s == (2, 3) and isinstance(s, ms.Shape)
    assert all(type(d) is int for d in s)


@pytest.mark.parametrize("s, text", [(ms.Shape(2, 3), "(2,3)"), (ms.Shape1(3), "(3,)"),
                                     (ms.Shape(1, 2, 3), "(1,2,3)"), (ms.Shape(), "()")])
def test_str_is_tuple_style_without_spaces(s, text):
    assert str(s) == text
    assert repr(s) == "Shape" + text


def test_equality_indexing_len():
    s = ms.Shape(4, 5, 6)
    assert s == ms.Shape3(4, 5, 6) and s == (4, 5, 6)
    assert s != ms.Shape(4, 5, 7) and s != ms.Shape(4, 5)
    assert (s[0], s[1], s[2], s[-1]) == (4, 5, 6, 6)
    assert len(s) == 3 and s.ndim == 3 and s.kDimension == 3 and s.kSubdim == 2
    assert list(s) == [4, 5, 6]
    with pytest.raises(IndexError):
        s[3]


def test_hashable_and_equal_shapes_hash_equal():
    d = {ms.Shape(2, 3): "a"}
    assert d[ms.Shape2(2, 3)] == "a"
    assert hash(ms.Shape(2, 3)) == hash(ms.Shape((2, 3)))
    assert len({ms.Shape(2, 3), ms.Shape(2, 3), ms.Shape(3, 2)}) == 2


def test_immutable():
    s = ms.Shape(2, 3)
    with pytest.raises(TypeError):
        s[0] = 5
    with pytest.raises(AttributeError):
        s.extra = 1
    assert s == (2, 3)


def test_size_and_flattening():
    s = ms.Shape(2, 3, 4)
    assert s.size() == 24 and s.Size() == 24
    assert s.flat_to_1d() == ms.Shape1(24)
    assert s.flat_to_2d() == ms.Shape2(6, 4)
    assert isinstance(s.flat_to_2d(), ms.Shape)


def test_flat_to_2d_of_1d_is_one_row():
    assert ms.Shape1(7).flat_to_2d() == (1, 7)
    assert ms.Shape1(7).FlatTo2D() == (1, 7)


@pytest.mark.parametrize("begin, end", [(0, 0), (0, 2), (1, 3), (2, 4), (0, 4), (3, 3)])
def test_prod_shape(begin, end):
    s = ms.Shape(2, 3, 5, 7)
    assert s.prod_shape(begin, end) == int(np.prod(s[begin:end]))
    assert s.ProdShape(begin, end) == s.prod_shape(begin, end)


def test_sub_shape_and_slice():
    s = ms.Shape(2, 3, 5, 7)
    assert s.sub_shape() == ms.Shape3(3, 5, 7) and isinstance(s.sub_shape(), ms.Shape)
    assert s.slice(1, 3) == ms.Shape2(3, 5) and s.Slice(0, 4) == s
    assert s.slice(2, 2) == ms.Shape()
    for b, e in [(-1, 2), (2, 1), (0, 5)]:
        with pytest.raises(IndexError, match=rf"Shape.slice\({b}, {e}\) out of range for a 4-D"):
            s.slice(b, e)


def test_factories():
    assert ms.Shape1(5) == (5,)
    assert ms.Shape2(1, 2) == (1, 2)
    assert ms.Shape3(1, 2, 3) == (1, 2, 3)
    assert ms.Shape4(1, 2, 3, 4) == (1, 2, 3, 4)
    assert ms.Shape5(1, 2, 3, 4, 5) == (1, 2, 3, 4, 5)
    assert all(isinstance(f(*range(1, k + 1)), ms.Shape)
               for k, f in enumerate([ms.Shape1, ms.Shape2, ms.Shape3, ms.Shape4, ms.Shape5], 1))


def test_zero_dims_are_allowed():
    assert ms.Shape(0, 3).size() == 0
    assert ms.Shape(0, 3).flat_to_2d() == (0, 3)


@pytest.mark.parametrize("bad", [-1, -7])
def test_negative_dim_is_value_error_naming_it(bad):
    with pytest.raises(ValueError, match=rf"dimension {bad} is negative"):
        ms.Shape(2, bad)
    with pytest.raises(ValueError, match=rf"dimension {bad} is negative"):
        ms.Tensor((bad, 2))


@pytest.mark.parametrize("bad", [2.5, "3", None, 1j])
def test_non_integer_dim_is_type_error_naming_it(bad):
    with pytest.raises(TypeError, match=r"dimension .* is not an integer") as info:
        ms.Shape(2, bad)
    assert repr(bad) in str(info.value)


# ---- convert_layout -----------------------------------------------------------------

LAYOUTS = {
    3: [(ms.kNCW, "NCW"), (ms.kNWC, "NWC"), (ms.kCWN, "CWN")],
    4: [(ms.kNCHW, "NCHW"), (ms.kNHWC, "NHWC"), (ms.kCHWN, "CHWN")],
    5: [(ms.kNCDHW, "NCDHW"), (ms.kNDHWC, "NDHWC"), (ms.kCDHWN, "CDHWN")],
}
CASES = [(nd, s, d) for nd, lays in LAYOUTS.items() for s in lays for d in lays]


def test_layout_flags_match_mshadow():
    assert (ms.kNCHW, ms.kNHWC, ms.kCHWN) == (0, 1, 2)
    assert (ms.kNCW, ms.kNWC, ms.kCWN) == (8, 9, 10)
    assert (ms.kNCDHW, ms.kNDHWC, ms.kCDHWN) == (32, 33, 34)


@pytest.mark.parametrize("nd, src, dst", CASES, ids=lambda c: c[1] if isinstance(c, tuple) else str(c))
def test_convert_layout_matches_numpy_transpose(nd, src, dst):
    shape = (2, 3, 5, 7, 11)[:nd]
    (sflag, sname), (dflag, dname) = src, dst
    # numpy oracle: an array laid out as src, axes permuted to dst
    perm = [sname.index(axis) for axis in dname]
    expected = np.empty(shape).transpose(perm).shape
    got = ms.convert_layout(ms.Shape(shape), sflag, dflag)
    assert got == expected and isinstance(got, ms.Shape)
    assert ms.ConvertLayout(got, dflag, sflag) == shape   # and back


def test_convert_layout_nchw_nhwc_example():
    assert ms.convert_layout(ms.Shape4(1, 3, 224, 225), ms.kNCHW, ms.kNHWC) == (1, 224, 225, 3)
    assert ms.convert_layout(ms.Shape4(1, 224, 225, 3), ms.kNHWC, ms.kNCHW) == (1, 3, 224, 225)
    assert ms.convert_layout(ms.Shape5(1, 3, 4, 5, 6), ms.kNCDHW, ms.kNDHWC) == (1, 4, 5, 6, 3)


@pytest.mark.parametrize("nd, bad", [(4, ms.kNCW), (4, ms.kNCDHW), (4, 99), (3, ms.kNCHW),
                                     (5, ms.kNHWC)])
def test_convert_layout_invalid_layout_message(nd, bad):
    shape = ms.Shape((2, 3, 4, 5, 6)[:nd])
    good = LAYOUTS[nd][0][0]
    with pytest.raises(ValueError, match=rf"^Invalid layout for {nd}d shape {bad}$"):
        ms.convert_layout(shape, bad, good)
    with pytest.raises(ValueError, match=rf"^Invalid layout for {nd}d shape {bad}$"):
        ms.convert_layout(shape, good, bad)


@pytest.mark.parametrize("shape", [(2,), (2, 3), (1, 2, 3, 4, 5, 6)])
def test_convert_layout_wrong_rank(shape):
    with pytest.raises(ValueError, match=r"expected a 3-, 4- or 5-D shape"):
        ms.convert_layout(shape, ms.kNCHW, ms.kNHWC)
