"""Pure logic of headgate-django: no Django, no I/O.

Everything here takes plain values and returns plain values, so it is tested without a
database in milliseconds. ``tests/unit/test_kernel_purity.py`` keeps it that way.
"""
