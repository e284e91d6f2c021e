from django.db import models


class Execution(models.Model):
    """One row per handler execution, written by the test tasks: the evidence that lets
    tests count how often a job really ran, under which attempt and fence."""

    job_id = models.CharField(max_length=255, db_index=True)
    label = models.CharField(max_length=64, blank=True, default="")
    attempt = models.IntegerField()
    fence = models.BigIntegerField()
    worker = models.CharField(max_length=255, blank=True, default="")
    pid = models.IntegerField(default=0)
    started_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "testapp"
