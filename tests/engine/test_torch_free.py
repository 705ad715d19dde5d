"""Serving processes do without PyTorch until a constrained request needs xgrammar.

Each check runs in a fresh interpreter: whether PyTorch is imported is a fact about a
whole process, and the test session itself has long imported it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

SERVE_AND_CONSTRAIN = """
import json, sys
import django
django.setup()
import mlxlab.asgi  # the web process's whole import graph
from inference.engine.process.startup import prepare_mlx_process
prepare_mlx_process()  # as a model worker starts
from inference.engine import load_model
from inference.engine.prompting.grammar import GrammarCompiler, GrammarProcessor
from inference.protocol.grammar import GrammarSpec
import mlx.core as mx

loaded = load_model(sys.argv[1])
prompt = loaded.tokenizer.apply_chat_template(
    [{"role": "user", "content": "hi"}], add_generation_prompt=True
)
before = "torch" in sys.modules
compiler = GrammarCompiler(loaded.tokenizer, loaded.vocab_size, sorted(loaded.tokenizer.eos_token_ids))
processor = GrammarProcessor(compiler.compile(GrammarSpec("choice", "(yes|no)")))
masked = processor(mx.array(prompt), mx.zeros((1, loaded.vocab_size)))
allowed = [i for i, v in enumerate(masked[0].tolist()) if v > float("-inf")]
print(json.dumps({"before": before, "after": "torch" in sys.modules, "prompt": len(prompt),
                  "allowed": [loaded.tokenizer.decode([i]) for i in allowed]}))
"""


def test_the_engine_serves_without_pytorch_until_a_grammar_needs_it(model_folder):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mlxlab.settings"}
    done = subprocess.run(
        [sys.executable, "-c", SERVE_AND_CONSTRAIN, str(model_folder)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["prompt"] > 0
    assert result["before"] is False  # loading, templating and the web tier's imports
    # The first constrained request still works: xgrammar (and PyTorch with it) came in.
    assert result["after"] is True
    assert result["allowed"] and all("yes".startswith(t) or "no".startswith(t)
                                     for t in result["allowed"])  # fmt: skip
    assert "PyTorch was not found" not in done.stderr
