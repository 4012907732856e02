/* The one NaN rule of the native harnesses (neon_vs_scalar.c, fma_exact.c): where two
 * operands are NaN, or where fma's 0 * inf meets a NaN c, which NaN comes out depends on the
 * instruction's operand order, which C leaves to the compiler (it may swap a commutative
 * operand): such a result need only be NaN. With one NaN operand its bits must come
 * through. */
#ifndef MS_TEST_NAN_RULE_H_
#define MS_TEST_NAN_RULE_H_
#include <math.h>
#define NANS_OK(a, b, c) ((((a) != (a)) + ((b) != (b)) + ((c) != (c)) >= 2)                 \
                          || ((c) != (c) && (((a) == 0 && isinf(b)) || ((b) == 0 && isinf(a)))))
#endif
