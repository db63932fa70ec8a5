from django.apps import AppConfig


class LabConfig(AppConfig):
    name = "example_project.lab"
    label = "lab"
