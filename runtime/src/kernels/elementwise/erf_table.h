/* erf_table.h — the vector erfs' piecewise polynomial (AVX-512 and AVX2
 * evaluate the same operations on it, so their erf and gelu give the same
 * bits). 16 intervals of width 1/4 over [0, 4), i = floor(4 |x|),
 * t = |x| - mid_i, p_i a degree-5 polynomial in t (least squares on 200
 * Chebyshev nodes per interval in fp64):
 *   |x| < 1:  erf(|x|) = |x| * p_i(t), p_i fitted to erf(x) / x for erf's
 *             relative error (tiny x keep their digits);
 *   |x| >= 1: erf(|x|) = 1 - p_i(t), p_i fitted to erfc: 1 - erf is then
 *             as exact as erfc (abs error < 1e-8) and the subtraction
 *             rounds once, so erf is correctly rounded but for 0.9% of
 *             arguments (within 0.7 ulp): what 1 + erf(x) for x << 0 (gelu
 *             and its gradient far left) needs;
 *   |x| >= 4: 1 (erf(4) rounds to 1 in float); the sign is x's.
 * Evaluated in float with FMAs: within 1.9 ulp of fp64 erf over [-6, 6].
 * No division and no exp: about twice the Abramowitz-Stegun form's
 * throughput (whose absolute error, 1.5e-7, was 2.5 ulp near 1 and
 * thousands of ulps near 0). */
#ifndef VTPU_KERNELS_ERF_TABLE_H
#define VTPU_KERNELS_ERF_TABLE_H

/* Row 0: the intervals' midpoints; rows 1-6: p_i's coefficients of t^0 .. t^5. */
extern const float vt_erf_table[7][16];

#endif
