"""A tiny Django app whose ``tasks`` module the worker autodiscovers."""
