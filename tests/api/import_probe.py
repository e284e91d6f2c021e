"""Imported by nothing: a test checks that a schedule's ``task`` sent to the API does not
make the server import a module it names (its import runs the module's code)."""
