from django.contrib.auth import views as auth_views
from django.urls import path

from . import views

urlpatterns = [
    path("", views.chat, name="chat"),
    path("models/", views.models, name="models"),
    path("side-by-side/", views.side_by_side, name="side-by-side"),
    path("settings/", views.lab_settings, name="settings"),
    path("usage/", views.usage, name="usage"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
