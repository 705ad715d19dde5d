"""A worker's vectors as OpenAI's embeddings list, in the encoding the request asked for."""

from __future__ import annotations

import base64
import json

from ..protocol.embeddings import Embedded, unpack_vector


def embeddings_body(embedded: Embedded, *, model: str, encoding_format: str) -> bytes:
    """The response's JSON: `base64` is the vector's little-endian float32 bytes, as
    OpenAI sends it (and its SDKs decode with numpy), `float` a list of numbers."""
    if encoding_format == "base64":
        vectors = [base64.b64encode(packed).decode("ascii") for packed in embedded.vectors]
    else:
        vectors = [unpack_vector(packed) for packed in embedded.vectors]
    data = [
        {"object": "embedding", "index": index, "embedding": vector}
        for index, vector in enumerate(vectors)
    ]
    usage = {"prompt_tokens": embedded.prompt_tokens, "total_tokens": embedded.prompt_tokens}
    body = {"object": "list", "data": data, "model": model, "usage": usage}
    return json.dumps(body, separators=(",", ":")).encode()
