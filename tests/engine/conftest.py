"""The engine on the real default model, without Django."""

import pytest

from inference.engine import Engine, EngineConfig, load_model


@pytest.fixture(scope="session")
def engine(model_folder):
    engine = Engine(lambda: load_model(model_folder), config=EngineConfig(max_batch_size=8)).start()
    yield engine
    engine.shutdown()
