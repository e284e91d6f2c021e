"""Benchmarks for headgate-django (run ``python benchmarks/jobs.py --help``)."""
