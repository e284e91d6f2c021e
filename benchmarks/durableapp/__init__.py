"""The durable benchmark's definitions, in a ``tasks`` module the worker autodiscovers."""
