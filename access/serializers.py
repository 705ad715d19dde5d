"""Shapes of /api requests and answers (also their OpenAPI schema)."""

from __future__ import annotations

from rest_framework import serializers

from labsettings import lab_settings

from .models import ApiKey


class ApiKeySerializer(serializers.ModelSerializer):
    """A key as listed: its prefix identifies it; the key itself is never shown again."""

    active = serializers.BooleanField(read_only=True)

    class Meta:
        model = ApiKey
        fields = [
            "id", "label", "prefix", "created_at", "last_used_at", "revoked_at", "active",
            "rpm", "tpm",
        ]  # fmt: skip
        read_only_fields = fields


class StrictCharField(serializers.CharField):
    """Only a JSON string: DRF would turn 0 or 1.5 into text, which the schema does not allow."""

    def to_internal_value(self, data) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


MAX_LIMIT = 2**31 - 1  # the column's range (PositiveIntegerField on every database)
LIMIT = "{what} per minute for this key; null: the server's default; 0: none (staff only)."


class ApiKeyLimitsSerializer(serializers.Serializer):
    """A key's own rate limits: staff set any; a member only lowers the server's default."""

    rpm = serializers.IntegerField(
        min_value=0, max_value=MAX_LIMIT, allow_null=True, required=False,
        help_text=LIMIT.format(what="Requests"),
    )  # fmt: skip
    tpm = serializers.IntegerField(
        min_value=0, max_value=MAX_LIMIT, allow_null=True, required=False,
        help_text=LIMIT.format(what="Tokens"),
    )  # fmt: skip

    def validate(self, data: dict) -> dict:
        request = self.context.get("request")
        if request is not None and not request.user.is_staff:
            defaults = {"rpm": lab_settings.rate_limit_rpm, "tpm": lab_settings.rate_limit_tpm}
            for name, default in defaults.items():
                value = data.get(name)
                if value is not None and _raises(value, default):
                    raise serializers.ValidationError(
                        {name: f"Only staff may set a limit above the server's ({default})."}
                    )
        return data


def _raises(value: int, default: int) -> bool:
    """Whether `value` allows more than the default does (0 is no limit)."""
    return value == 0 and default != 0 or (default != 0 and value > default)


class ApiKeyCreateSerializer(ApiKeyLimitsSerializer):
    label = StrictCharField(max_length=100, allow_blank=True, required=False, default="")


class ApiKeyUpdateSerializer(ApiKeyLimitsSerializer):
    label = StrictCharField(max_length=100, allow_blank=True, required=False)


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="The whole key: shown this once only.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
        read_only_fields = fields


class MeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    is_staff = serializers.BooleanField()
    authenticated_by = serializers.ChoiceField(choices=["session", "api_key"])
    api_key = serializers.CharField(
        allow_null=True, help_text="The prefix of the key in use, or 'static key'."
    )


class AccessSettingsSerializer(serializers.Serializer):
    api_key_required = serializers.BooleanField(help_text="Whether /v1 needs a key now.")
    static_api_keys = serializers.IntegerField(help_text="Keys from MLXLAB_API_KEYS.")
    active_api_keys = serializers.IntegerField()
    revoked_api_keys = serializers.IntegerField()
    allow_open_network_api = serializers.BooleanField()
    cors_allowed_origins = serializers.ListField(child=serializers.CharField())
    max_request_bytes = serializers.IntegerField()
    max_request_bytes_by_path = serializers.DictField(child=serializers.IntegerField())
    max_tokens_limit = serializers.IntegerField(allow_null=True)


class ErrorDetailSerializer(serializers.Serializer):
    """DRF's error shape for authentication, permission, parse and not-found errors."""

    detail = serializers.CharField()
