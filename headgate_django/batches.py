"""Batch handlers, ``@task(batch_size=…, batch_window=…)``: what their members are.

A batch handler takes a list of :class:`BatchMember` (up to ``batch_size`` jobs of its
kind claimed together) and returns ``None`` or a mapping from job id to each member's
result or exception; see :mod:`headgate_django.worker.batches` for the rules.
"""

from headgate_django.worker.batches import BatchMember

__all__ = ["BatchMember"]
