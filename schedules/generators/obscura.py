"""placeholder"""
from schedules.generators.strawman import strawman as _s
def obscura(*a, **k):
    return _s(*a, **k)
