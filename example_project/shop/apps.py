from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "example_project.shop"
    label = "shop"
    default_auto_field = "django.db.models.BigAutoField"
