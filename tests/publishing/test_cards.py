"""Model cards with and without evaluation figures (no Hub, no worker)."""

from __future__ import annotations

from huggingface_hub import ModelCard

from publishing.cards import finetuned_model_card, quantized_model_card

BASE = {"name": "smol", "adapter": None, "perplexity": 7.0, "accuracy": 0.5, "exact_match": None}
TUNED = {**BASE, "adapter": "my-lora", "perplexity": 6.123456, "accuracy": 0.75}
EVALUATION = {"variants": [BASE, TUNED], "dataset": {"source": {"upload": "x"}, "label": "qa"}}


def test_no_evaluation_no_model_index():
    card = quantized_model_card("me/smol-q4", {"model": "smol"}, {"bits": 4})
    assert "model-index" not in str(card) and "## Evaluation" not in str(card)


def test_an_adapters_card_carries_its_own_figures_not_the_bases():
    made = finetuned_model_card("me/lora", {"model": "smol"}, {}, True, (EVALUATION, 1))
    card = ModelCard(str(made))
    metrics = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert metrics == {"perplexity": 6.1235, "accuracy": 0.75}  # no exact-match examples
    assert {r.dataset_type for r in card.data.eval_results} == {"custom"}
    assert "| `smol` (base) | 7.000 | 50.0% | — |" in card.text
    assert "**this model** (`smol + my-lora`) | 6.123 | 75.0% | — |" in card.text
