"""Whether the installed mlx-lm (or mlx-embeddings, for an encoder embedding model, or
mlx-vlm, for a model that takes images) can load a model, from its config.json alone.

Read without importing mlx-lm (which loads MLX): the architectures are the modules
under `mlx_lm/models/` that define a `Model`, and the aliases are mlx-lm's public
`MODEL_REMAPPING` and `MODEL_ARCHITECTURE_REMAPPING` tables, read from its source.
This is the rule `mlx_lm.utils.load` applies, so a model passed here is one it loads.

A model of one of mlx-vlm's types with a vision (or audio) tower is served through mlx-vlm
where the engine serves its family (inference/protocol/media.py SERVED_FAMILIES). Of the
other families, those mlx-lm loads (Mistral 3, say: it drops the vision tower) are served
as text, as before the lab took images, and the search says so (text_only_reason); the
rest are not served.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import threading
from pathlib import Path

from inference.protocol.embedding_folder import is_encoder_config
from inference.protocol.media import SERVED_FAMILIES, VISION, mlx_vlm_media

# Searches describe repos on several threads; building the tables once at a time keeps
# ast.parse, which is not safe to run concurrently, to one thread.
_building = threading.Lock()


def mlx_lm_version() -> str:
    return importlib.metadata.version("mlx-lm")


def mlx_vlm_version() -> str:
    return importlib.metadata.version("mlx-vlm")


@functools.cache
def _package_dir() -> Path:
    spec = importlib.util.find_spec("mlx_lm")  # finds without executing the package
    if spec is None or spec.origin is None:
        raise RuntimeError("mlx-lm is not installed")
    return Path(spec.origin).parent


def loadable_model_types() -> frozenset[str]:
    """The model modules of the installed mlx-lm (those defining `class Model`)."""
    with _building:
        return _loadable_model_types()


@functools.cache
def _loadable_model_types() -> frozenset[str]:
    found = set()
    for module in (_package_dir() / "models").glob("*.py"):
        if "class Model(" in module.read_text(errors="replace"):
            found.add(module.stem)
    return frozenset(found)


def _remappings() -> tuple[dict, dict]:
    with _building:
        return _read_remappings()


@functools.cache
def _read_remappings() -> tuple[dict, dict]:
    tree = ast.parse((_package_dir() / "utils.py").read_text())
    tables = {"MODEL_REMAPPING": {}, "MODEL_ARCHITECTURE_REMAPPING": {}}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in tables:
                tables[target.id] = ast.literal_eval(node.value)
    return tables["MODEL_REMAPPING"], tables["MODEL_ARCHITECTURE_REMAPPING"]


def mlx_lm_module(config: dict) -> str | None:
    """The mlx-lm module that would load this config, or None if it names no model type."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        return None
    by_type, by_architecture = _remappings()
    architectures = config.get("architectures") or ()
    if isinstance(architectures, str):
        architectures = (architectures,)
    for architecture in architectures:
        if (model_type, architecture) in by_architecture:
            return by_architecture[(model_type, architecture)]
    return by_type.get(model_type, model_type)


def architecture_problem(config: dict) -> str | None:
    """Why neither the installed mlx-lm nor, for an encoder, mlx-embeddings can load a
    model with this config, or None if one can."""
    module = mlx_lm_module(config)
    if module is None:
        return "its config.json names no model_type"
    if media := mlx_vlm_media(config):
        return media_problem(config, media)
    if module not in loadable_model_types() and not is_encoder_config(config):
        model_type = config.get("model_type")
        return f"model_type '{model_type}' is not supported by mlx-lm {mlx_lm_version()}"
    return None


def media_problem(config: dict, media: tuple[str, ...]) -> str | None:
    """Why the lab cannot serve a model that takes `media` (through mlx-vlm), or None."""
    model_type = str(config.get("model_type")).replace("-", "_")
    if model_type in SERVED_FAMILIES or mlx_lm_module(config) in loadable_model_types():
        return None
    takes = " and ".join("images" if kind == VISION else kind for kind in media)
    return (
        f"model_type '{model_type}' takes {takes} (mlx-vlm {mlx_vlm_version()}), which the"
        f" lab serves only for {', '.join(SERVED_FAMILIES)}"
    )


def text_only_reason(config: dict) -> str | None:
    """For a model that takes media the lab does not serve for its family, but mlx-lm
    loads as text: what the search says of it; else None."""
    media = mlx_vlm_media(config)
    if not media or str(config.get("model_type")).replace("-", "_") in SERVED_FAMILIES:
        return None
    takes = " and ".join("images" if kind == VISION else kind for kind in media)
    return f"its {takes} are not served yet for this family (text only)"
