"""Development helpers shared by the tests, the example project and the benchmarks.

Not part of the installed package: nothing in ``django_pgqueue`` imports from here.
"""
