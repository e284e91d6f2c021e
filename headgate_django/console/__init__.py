"""Console pages under the admin site: staff only, read-only, using the admin's look."""
