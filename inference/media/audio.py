"""Audio a client sent (OpenAI's `input_audio`: base64 wav or mp3), checked by its header and
its length (MLXLAB_MAX_AUDIO_SECONDS). The parse runs off the event loop (views_openai.py):
reading an mp3's length decodes its frames."""

from __future__ import annotations

import hashlib

from labsettings import lab_settings

from ..errors import ApiError
from ..protocol.media import audio_part
from .fetch import decode_base64

FORMATS = ("wav", "mp3")


def _looks_like(data: bytes, audio_format: str) -> bool:
    if audio_format == "wav":
        return data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    # An ID3 tag, or an MPEG audio frame's sync word.
    return data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0)


def checked_audio(value, *, param: str) -> dict:
    """The message part of an `input_audio` object {"data": base64, "format": wav|mp3}."""
    if not isinstance(value, dict) or not isinstance(value.get("data"), str):
        raise ApiError(f"{param} must be an object with a base64 'data' string", param=param)
    audio_format = value.get("format")
    if audio_format not in FORMATS:
        raise ApiError(f"{param}.format must be one of {', '.join(FORMATS)}", param=param)
    data = decode_base64(value["data"], param=param, what="its data")
    if not _looks_like(data, audio_format):
        raise ApiError(f"{param}: the data is not {audio_format} audio", param=param)
    _check_seconds(data, audio_format, param)
    return audio_part(data, audio_format=audio_format, sha256=hashlib.sha256(data).hexdigest())


def _check_seconds(data: bytes, audio_format: str, param: str) -> None:
    import miniaudio  # mlx-vlm's reader of wav and mp3

    read = miniaudio.wav_get_info if audio_format == "wav" else miniaudio.mp3_get_info
    try:
        seconds = read(data).duration
    except miniaudio.DecodeError:
        raise ApiError(
            f"{param}: the {audio_format} audio cannot be decoded", param=param
        ) from None
    limit = lab_settings.max_audio_seconds
    if seconds > limit:
        raise ApiError(
            f"{param}: the audio is {seconds:.1f} seconds long, more than this server's limit "
            f"of {limit:g} seconds (MLXLAB_MAX_AUDIO_SECONDS)",
            param=param,
        )
