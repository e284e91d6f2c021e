from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "sampleproject.demo"
    label = "demo"
    verbose_name = "headgate-django demo"
