from django.urls import path

from . import views

urlpatterns = [
    path("settings/hf-token", views.hf_token),
    path("quantize/push", views.push, {"kind": "quantize"}),
    path("finetune/push", views.push, {"kind": "finetune"}),
    path("dataset/push", views.push, {"kind": "dataset"}),
]
