from django.apps import AppConfig


class MlxLabConfig(AppConfig):
    """The project package, an app for the commands that span every app (runlab)."""

    name = "mlxlab"
    verbose_name = "MLX Lab"
