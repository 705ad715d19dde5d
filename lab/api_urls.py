from django.urls import path

from . import api_conversations as conversations
from . import api_events as events
from . import api_hub as hub
from . import api_model_adapters as model_adapters
from . import api_models as models
from . import api_side_by_side as side_by_side

urlpatterns = [
    path("conversations", conversations.ConversationListApi.as_view()),
    path("conversations/<int:conversation_id>", conversations.ConversationApi.as_view()),
    path(
        "conversations/<int:conversation_id>/branch", conversations.ConversationBranchApi.as_view()
    ),
    path(
        "conversations/<int:conversation_id>/export", conversations.ConversationExportApi.as_view()
    ),
    path("conversations/<int:conversation_id>/show", conversations.ConversationShowApi.as_view()),
    path("messages/<int:message_id>", conversations.MessageApi.as_view()),
    path(
        "messages/<int:message_id>/attachments/<int:position>",
        conversations.MessageAttachmentApi.as_view(),
    ),
    path("side-by-side/votes", side_by_side.SideBySideVoteApi.as_view()),
    path("presets", conversations.PresetListApi.as_view()),
    path("presets/<int:preset_id>", conversations.PresetApi.as_view()),
    path("models", models.ModelListApi.as_view()),
    path("models/import", models.ModelImportApi.as_view()),
    path("models/imports/<str:import_id>", models.ModelImportStatusApi.as_view()),
    path("models/<str:name>", models.ModelDetailApi.as_view()),
    path("models/<str:name>/load", models.ModelLoadApi.as_view()),
    path("models/<str:name>/unload", models.ModelUnloadApi.as_view()),
    path("models/<str:name>/drain", models.ModelDrainApi.as_view()),
    path("models/<str:name>/adapters", model_adapters.ModelAdaptersApi.as_view()),
    path("models/<str:name>/adapters/<str:adapter>", model_adapters.ModelAdapterApi.as_view()),
    path("models/<str:name>/update", hub.ModelUpdateApi.as_view()),
    path("hub/models", hub.HubModelSearchApi.as_view()),
    path("events", events.EventsApi.as_view()),
]
