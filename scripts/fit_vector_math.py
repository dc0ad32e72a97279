#!/usr/bin/python3
"""Fits the polynomials of runtime/core/vector_math.h and measures them.

Usage: /usr/bin/python3 scripts/fit_vector_math.py

Least-squares fits at Chebyshev nodes in float64 (numpy), printed as the
header's C++ constants; then each function is evaluated in float32 as the
header does (numpy float32 arithmetic, one rounding per operation) on a
dense grid and its largest error printed in units in the last place of the
exact result (math.erf, math.tanh). exp needs no fit: its polynomial is
Taylor's, exact rationals.
"""
import math

import numpy as np
from numpy.polynomial import Polynomial
from numpy.polynomial import chebyshev

F = np.float32
ERF_SPLIT, ERF_END, TANH_SPLIT = 0.9, 4.0, 0.625


def nodes(lo, hi, n=4000):
    return np.cos(np.linspace(0, math.pi, n)) * (hi - lo) / 2 + (hi + lo) / 2


def fit_in_square(fn, hi, deg):
    """fn(x) / x - 1 as a polynomial in s = x^2 on [0, hi^2]."""
    s = nodes(0, hi * hi)
    x = np.sqrt(np.maximum(s, 1e-300))
    y = np.array([fn(v) / v - 1 for v in x])
    return Polynomial.fit(s, y, deg, domain=[0, hi * hi],
                          window=[0, hi * hi]).convert().coef


def horner(coef, s):
    r = F(coef[-1])
    for c in coef[-2::-1]:
        r = F(F(r * s) + F(c))
    return r


def clenshaw(coef, u):
    b1, b2 = F(0), F(0)
    for c in coef[:0:-1]:
        b1, b2 = F(F(F(F(2) * u) * b1) - b2) + F(c), b1
        b1 = F(b1)
    return F(F(F(u * b1) - b2) + F(coef[0]))


def exp32(x):
    """vecExp: Cody and Waite's reduction, Taylor's degree 8."""
    n = F(F(F(x * F(1.44269504088896341)) + F(12582912.0)) - F(12582912.0))
    r = F(F(x - F(n * F(0.693359375))) - F(n * F(-2.12194440e-4)))
    q = horner([1 / math.factorial(k + 2) for k in range(6)], r)
    p = F(F(1) + F(r + F(F(r * r) * q)))
    n1 = int(n) >> 1
    return F(F(p * F(2.0 ** n1)) * F(2.0 ** (int(n) - n1)))


def ulps(value, exact):
    return abs(float(value) - exact) / float(np.spacing(F(exact)))


def main():
    erf_small = fit_in_square(math.erf, ERF_SPLIT, 6)
    mid, half = (ERF_SPLIT + ERF_END) / 2, (ERF_END - ERF_SPLIT) / 2
    a = nodes(ERF_SPLIT, ERF_END)
    erfc_scaled = chebyshev.chebfit((a - mid) / half,
                                    [math.erfc(v) * math.exp(v * v)
                                     for v in a], 12)
    tanh_small = fit_in_square(math.tanh, TANH_SPLIT, 6)
    for name, coef in (("kErfSmall", erf_small),
                       ("kErfcScaled", erfc_scaled),
                       ("kTanhSmall", tanh_small)):
        print("constexpr float %s[] = {%s};" % (
            name, ", ".join("%.9ef" % c for c in coef)))
    print("erfc scaled: mid %.17g, 1/half %.17g" % (mid, 1 / half))

    def erf32(x):
        s = F(x * x)
        if x < ERF_SPLIT:
            return F(x + F(x * horner(erf_small, s)))
        u = F(F(x - F(mid)) * F(1 / half))
        return F(F(1) - F(exp32(F(-s)) * clenshaw(erfc_scaled, u)))

    def tanh32(x):
        if x < TANH_SPLIT:
            return F(x + F(x * horner(tanh_small, F(x * x))))
        return F(F(1) - F(F(2) / F(exp32(F(2 * x)) + F(1))))

    grid = np.linspace(-87, 88.7, 100001).astype(F)
    print("exp  max ulp %.3f" % max(ulps(exp32(x), math.exp(float(x)))
                                    for x in grid))
    grid = np.linspace(1e-4, 3.9, 100001).astype(F)
    print("erf  max ulp %.3f" % max(ulps(erf32(x), math.erf(float(x)))
                                    for x in grid))
    grid = np.linspace(1e-4, 9, 100001).astype(F)
    print("tanh max ulp %.3f" % max(ulps(tanh32(x), math.tanh(float(x)))
                                    for x in grid))


if __name__ == "__main__":
    main()
