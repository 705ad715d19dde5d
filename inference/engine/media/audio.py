"""A sent clip's samples as a model's feature extractor takes them: mono float32 at its rate.

miniaudio (what mlx-vlm reads audio files with) decodes wav and mp3 and resamples in one
call; the web side has already checked the format and the clip's length (media/audio.py).
"""

from __future__ import annotations

import numpy as np


class AudioUndecodable(ValueError):
    """The bytes are not audio of their format: a client error."""


def decode_audio(data: bytes, *, rate: int) -> np.ndarray:
    """The clip's samples, mixed down to one channel, at `rate` samples a second."""
    import miniaudio

    try:
        decoded = miniaudio.decode(
            data, output_format=miniaudio.SampleFormat.FLOAT32, nchannels=1, sample_rate=rate
        )
    except miniaudio.DecodeError as error:
        raise AudioUndecodable(f"the audio cannot be decoded: {error}") from None
    return np.asarray(decoded.samples, dtype=np.float32)


def sampling_rate(processor) -> int:
    """The rate the processor's feature extractor takes (Gemma 3n's: 16 kHz)."""
    return int(processor.feature_extractor.sampling_rate)
