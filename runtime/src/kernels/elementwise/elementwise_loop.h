/* elementwise_loop.h — the leaf loops the portable elementwise microkernels
 * share (elementwise_ops.c, elementwise_math.c). */
#ifndef VTPU_ELEMENTWISE_LOOP_H
#define VTPU_ELEMENTWISE_LOOP_H

#include <stdint.h>

/* Blocks of 16 with `ivdep` let gcc vectorise at -O2 (its "very cheap" cost
 * model refuses loops needing an epilogue or an alias check). ivdep is true
 * here: out may equal an input, but element i only reads element i. The
 * body sees the element index as `i`. */
#define VLOOP(n, ...)                                                                                          \
    do {                                                                                                       \
        int64_t i0_ = 0;                                                                                       \
        for (; i0_ + 16 <= (n); i0_ += 16) {                                                                   \
            _Pragma("GCC ivdep") for (int64_t j_ = 0; j_ < 16; j_++) {                                         \
                int64_t i = i0_ + j_;                                                                          \
                __VA_ARGS__;                                                                                   \
            }                                                                                                  \
        }                                                                                                      \
        for (; i0_ < (n); i0_++) {                                                                             \
            int64_t i = i0_;                                                                                   \
            __VA_ARGS__;                                                                                       \
        }                                                                                                      \
    } while (0)

/* out[i] = EXPR over two operands of stride 1 or 0 (a scalar, read once):
 * EXPR sees x and y, of type T, and is converted to O. */
#define BIN_WALK(n, T, O, out, a, as, b, bs, EXPR)                                                             \
    do {                                                                                                       \
        if ((as) && (bs)) {                                                                                    \
            VLOOP(n, { T x = (a)[i], y = (b)[i]; (out)[i] = (O)(EXPR); });                                     \
        } else if (bs) {                                                                                       \
            const T x = (a)[0];                                                                                \
            VLOOP(n, { T y = (b)[i]; (out)[i] = (O)(EXPR); });                                                 \
        } else if (as) {                                                                                       \
            const T y = (b)[0];                                                                                \
            VLOOP(n, { T x = (a)[i]; (out)[i] = (O)(EXPR); });                                                 \
        } else {                                                                                               \
            const T x = (a)[0], y = (b)[0];                                                                    \
            const O r_ = (O)(EXPR);                                                                            \
            for (int64_t i = 0; i < (n); i++) (out)[i] = r_;                                                   \
        }                                                                                                      \
    } while (0)

#endif /* VTPU_ELEMENTWISE_LOOP_H */
