"""The distributions the statistics' tests read their p-values from (``docs/statistics.md``).

Pure, in the standard library only: the chi-squared upper tail, the regularized
incomplete beta function, the binomial upper tail and the p-value of a Pearson
correlation, each keeping a small tail's relative precision.
"""

from __future__ import annotations

import math
from functools import lru_cache

# -- the chi-squared distribution --------------------------------------------------------------

_EPS = 1e-16
_TINY = 1e-300
_MAX_TERMS = 100_000


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-squared with ``df`` degrees of freedom: Q(df/2, x/2)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, not {df}")
    if math.isnan(x):
        return math.nan
    if x <= 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    return _gamma_q(df / 2, x / 2)


def _gamma_q(a: float, x: float) -> float:
    """The regularized upper incomplete gamma function Q(a, x), for a > 0 and x > 0.

    The series converges fast below a + 1 and gives P = 1 - Q, which is then not
    small; above it the continued fraction gives Q itself, so a tail
    probability keeps its relative precision down to the smallest doubles.
    """
    # x^a e^-x / Gamma(a), in logarithms so that large a and x do not overflow.
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = total = 1 / a
        denominator = a
        for _ in range(_MAX_TERMS):
            denominator += 1
            term *= x / denominator
            total += term
            if abs(term) < abs(total) * _EPS:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    # Modified Lentz evaluation of the continued fraction for Q.
    b = x + 1 - a
    c = 1 / _TINY
    d = 1 / b
    h = d
    for i in range(1, _MAX_TERMS):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        if abs(d) < _TINY:
            d = _TINY
        c = b + an / c
        if abs(c) < _TINY:
            c = _TINY
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < _EPS:
            break
    return math.exp(log_front) * h


def beta_inc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a > 0 and b > 0.

    The continued fraction converges fast below (a + 1) / (a + b + 2) and gives
    I itself there, so a small tail keeps its relative precision; above, the
    symmetry I_x(a, b) = 1 - I_(1-x)(b, a) is used.
    """
    if a <= 0 or b <= 0:
        raise ValueError(f"the beta function's parameters must be positive, not {a}, {b}")
    if math.isnan(x):
        return math.nan
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x < (a + 1) / (a + b + 2):
        return _beta_front(a, b, x) * _beta_fraction(a, b, x) / a
    return max(0.0, 1.0 - _beta_front(b, a, 1 - x) * _beta_fraction(b, a, 1 - x) / b)


def _beta_front(a: float, b: float, x: float) -> float:
    """x^a (1-x)^b / B(a, b), in logarithms so that large a and b do not overflow."""
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    return math.exp(log_front)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction for I_x(a, b), by the modified Lentz method.

    Each step's two terms are written out rather than looped over, and the
    guards against a zero compare without ``abs``: this runs tens to hundreds of
    steps for each arc of the whole series an outcome moves, and the same
    operations in the same order keep every p-value bit for bit.
    """
    tiny = _TINY
    c = 1.0
    d = 1 - (a + b) * x / (a + 1)
    d = 1 / (d if d >= tiny or d <= -tiny else tiny)
    h = d
    for m in range(1, _MAX_TERMS):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1 + even * d
        d = 1 / (d if d >= tiny or d <= -tiny else tiny)
        c = 1 + even / c
        if -tiny < c < tiny:
            c = tiny
        h *= d * c
        d = 1 + odd * d
        d = 1 / (d if d >= tiny or d <= -tiny else tiny)
        c = 1 + odd / c
        if -tiny < c < tiny:
            c = tiny
        delta = d * c
        h *= delta
        if -_EPS < delta - 1 < _EPS:
            break
    return h


def binomial_sf(count: int, trials: int, p: float) -> float:
    """P(X >= count) for X binomial(trials, p): I_p(count, trials - count + 1)."""
    if count <= 0:
        return 1.0
    if count > trials:
        return 0.0
    return _binomial_tail(count, trials, p)


@lru_cache(maxsize=4096)
def _binomial_tail(count: int, trials: int, p: float) -> float:
    """Remembered: a full window's arcs ask the same few tails outcome after outcome
    (its number of results no longer moves, its most-hit count seldom)."""
    return beta_inc(count, trials - count + 1, p)


def pearson_p_value(r: float, pairs: int) -> float:
    """The two-sided p-value of a Pearson correlation ``r`` over ``pairs`` pairs.

    Under independence (and normal margins) (r + 1) / 2 follows Beta(n/2 - 1,
    n/2 - 1): the exact distribution ``scipy.stats.pearsonr`` uses too.
    """
    if pairs < 3:
        raise ValueError(f"a correlation's p-value needs at least 3 pairs, not {pairs}")
    half = pairs / 2 - 1
    return min(1.0, 2 * beta_inc(half, half, (1 - abs(r)) / 2))
