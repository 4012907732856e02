"""dmlc-core's text rules for parameter values: dmlc::stof/stod, istream >> int/float, bool, optional.

Pure functions that know nothing of fields or keys; they raise BadFormat, OutOfRange or Trailing
and the field turns those into dmlc's exact messages. Printing follows C++ ostream (%g) output.
"""
import math
import re
import struct

# dmlc::isspace (strtonum.h) leaves out '\v'; the C locale's isspace, used by istream, keeps it.
DMLC_SPACE = " \t\r\n\f"
C_SPACE = " \t\n\v\f\r"
_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1
_MAX_FRACTION_DIGITS = 19   # dmlc's kStrtofMaxDigits: later fraction digits are ignored
_F32 = struct.Struct("<f")
FLT_MIN = 2.0 ** -126
DBL_MIN = 2.0 ** -1022


class BadFormat(Exception):
    """No value could be read (std::invalid_argument, or the istream's failbit); ``hint``,
    when set, says what to write instead (a second line after dmlc's message)."""

    def __init__(self, text, hint=None):
        super().__init__(text)
        self.hint = hint


class OutOfRange(Exception):
    """The value does not fit the type (std::out_of_range)."""


class Trailing(Exception):
    """dmlc::stof/stod read a number but characters are left over; ``rest`` holds them."""

    def __init__(self, rest):
        super().__init__(rest)
        self.rest = rest


def to_f32(x):
    """Round a Python float to the nearest float32, as C's ``(float)x`` does (inf on overflow)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _u64_to_f32(n):
    # (float)uint64 rounds once; going through a double would round twice, so round to 24 bits here
    extra = n.bit_length() - 24
    if extra > 0:
        q, r = divmod(n, 1 << extra)
        half = 1 << (extra - 1)
        if r > half or (r == half and q & 1):
            q += 1
        n = q << extra
    return float(n)


def parse_float_prefix(text, double):
    """Port of ``dmlc::ParseFloat<T, CheckRange=true>``: return (value, end index).

    Raises OutOfRange where dmlc sets ERANGE. Quirks kept on purpose: a lone sign, '.', 'e' or
    'f' reads as 0; more than 19 fraction digits are ignored; digits before the point wrap
    modulo 2**64; the arithmetic is done in the target precision, step by step.
    """
    rnd = float if double else to_f32
    max_exp = 308 if double else 38
    max_sig = 1.79769313486231570 if double else to_f32(3.402823466)
    min_sig = 2.22507385850720139 if double else to_f32(1.175494351)
    n = len(text)

    def at(i):
        return text[i] if i < n else "\0"

    def digit(c):
        return "0" <= c <= "9"

    p = 0
    while at(p) in DMLC_SPACE:
        p += 1
    positive = True
    if at(p) == "-":
        positive, p = False, p + 1
    elif at(p) == "+":
        p += 1

    # inf / infinity / nan / nan(chars), case-insensitive: dmlc compares (c | 32)
    i = 0
    while i < 8 and chr(ord(at(p + i)) | 32) == "infinity"[i]:
        i += 1
    if i in (3, 8):
        return (math.inf if positive else -math.inf), p + i
    if all(chr(ord(at(p + j)) | 32) == "nan"[j] for j in range(3)):
        p += 3
        if at(p) == "(":
            p += 1
            while at(p).isascii() and (at(p).isalnum() or at(p) == "_"):
                p += 1
            if at(p) != ")":   # dmlc: CHECK failure "Invalid NAN literal"
                raise BadFormat(text)
            p += 1
        return math.nan, p   # dmlc returns quiet_NaN() whatever the sign

    predec = 0
    while digit(at(p)):
        predec = (predec * 10 + ord(at(p)) - 48) & _U64
        p += 1
    value = float(predec) if double else _u64_to_f32(predec)

    if at(p) == ".":
        p += 1
        val2, pow10, count = 0, 1, 0
        while digit(at(p)):
            if count < _MAX_FRACTION_DIGITS:
                val2, pow10 = val2 * 10 + ord(at(p)) - 48, pow10 * 10
            p += 1
            count += 1
        value = rnd(value + rnd(float(val2) / float(pow10)))

    if at(p) in "eE":
        p += 1
        negative_exp = False
        if at(p) == "-":
            negative_exp, p = True, p + 1
        elif at(p) == "+":
            p += 1
        expon = 0
        while digit(at(p)):
            expon = (expon * 10 + ord(at(p)) - 48) & _U32
            p += 1
        if expon > max_exp:
            raise OutOfRange(text)
        if expon == max_exp and ((not negative_exp and value > max_sig)
                                 or (negative_exp and value < min_sig)):
            raise OutOfRange(text)
        scale = 1.0
        while expon >= 8:
            scale, expon = rnd(scale * 1e8), expon - 8
        while expon > 0:
            scale, expon = rnd(scale * 10.0), expon - 1
        value = rnd(value / scale) if negative_exp else rnd(value * scale)

    if at(p) in "fF":
        p += 1
    return (value if positive else -value), p


def stof(text, double=False):
    """``dmlc::stof`` / ``dmlc::stod`` plus FieldEntry<float>'s check that nothing is left over."""
    value, end = parse_float_prefix(text, double)
    if end == 0:
        raise BadFormat(text)
    if end < len(text):
        raise Trailing(text[end:])
    return value


def expect_end(text, pos):
    """FieldEntryBase::Set: after the value only whitespace may follow."""
    if text[pos:].strip(C_SPACE):
        raise BadFormat(text)


def _skip_space(text, pos):
    while pos < len(text) and text[pos] in C_SPACE:
        pos += 1
    return pos


def read_int(text, pos, bits, signed):
    """``istream >> intN``: skip spaces, sign, decimal digits; return (value, end).

    Overflow sets failbit (BadFormat). Unsigned types accept '-' and wrap, as libstdc++ does
    (``-1`` -> 4294967295).
    """
    p = start = _skip_space(text, pos)
    if p < len(text) and text[p] in "+-":
        p += 1
    digits = p
    while p < len(text) and "0" <= text[p] <= "9":
        p += 1
    if p == digits:
        raise BadFormat(text)
    negative = text[start] == "-"
    limit = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    significant = text[digits:p].lstrip("0")
    # more digits than the type holds is an overflow (failbit) without converting them: a
    # Python int() of more than 4300 digits raises ValueError
    if len(significant) > len(str(limit)) or int(significant or "0") > limit + (
            1 if signed and negative else 0):
        low = -(limit + 1) if signed else 0
        raise BadFormat(text, f"the number ({len(significant)} digits) does not fit a "
                              f"{bits}-bit {'signed' if signed else 'unsigned'} integer; "
                              f"write one from {low} to {limit}")
    magnitude = int(significant or "0")
    value = -magnitude if negative else magnitude
    return (value % (1 << bits) if not signed else value), p


_ISTREAM_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def read_float(text, pos, double):
    """``istream >> float|double`` (libstdc++): no inf/nan, overflow sets failbit."""
    p = _skip_space(text, pos)
    m = _ISTREAM_FLOAT.match(text, p)
    if m is None:
        raise BadFormat(text)
    value = float(m.group())
    if not double:
        value = to_f32(value)
    if math.isinf(value):
        raise BadFormat(text)
    return value, m.end()


def parse_int(text, bits=32, signed=True):
    value, end = read_int(text, 0, bits, signed)
    expect_end(text, end)
    return value


def parse_bool(text):
    """FieldEntry<bool>: exactly true/false/1/0, case-insensitive, no spaces."""
    word = text.lower()
    if word in ("true", "1"):
        return True
    if word in ("false", "0"):
        return False
    raise BadFormat(text)


def parse_optional(text, inner):
    """``istream >> dmlc::optional<T>`` for T in int, float, double ('inner' names it).

    'None' must open the text exactly; an integer may carry an 'L' suffix (``1L``).
    """
    if text[:4] == "None":
        expect_end(text, 4)
        return None
    if inner == "int":
        value, end = read_int(text, 0, 32, True)
        if text[end:end + 1] == "L":
            end += 1
    else:
        value, end = read_float(text, 0, inner == "double")
    expect_end(text, end)
    return value


def parse_optional_bool(text):
    """``istream >> dmlc::optional<bool>``: the alphanumeric word after any spaces."""
    p = end = _skip_space(text, 0)
    while end < len(text) and text[end].isascii() and text[end].isalnum():
        end += 1
    word = text[p:end].lower()
    expect_end(text, end)
    if word in ("1", "true"):
        return True
    if word in ("0", "false"):
        return False
    if word == "none":
        return None
    raise BadFormat(text)


def format_g(x, precision):
    """``ostream << x`` with ``setprecision(precision)``: printf's %g, and glibc's '-nan'."""
    if math.isnan(x):
        return "-nan" if math.copysign(1.0, x) < 0 else "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return "%.*g" % (precision, x)
