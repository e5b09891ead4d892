"""Rastrigin (d = 6): minimise the Rastrigin function on the box [-5.12, 5.12]^6.

Plain Python on purpose (no numpy import), so one evaluation takes milliseconds.
"""


# EVOLVE-BLOCK-START
def candidate():
    """The 6 coordinates to evaluate."""
    x = [2.2, -3.1, 1.4, -2.6, 3.3, -0.7]
    return x


# EVOLVE-BLOCK-END


def solve():
    """Entry point: 6 floats, each clamped into [-5.12, 5.12]."""
    return [min(5.12, max(-5.12, float(v))) for v in candidate()]
