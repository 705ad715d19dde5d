"""Token counts of dataset examples, made the way mlx-lm's trainer tokenizes them.

Mirrors mlx_lm/tuner/datasets.py: chats and completions go through the chat template
(completions as one user and one assistant turn), texts are encoded with an EOS added.
"""

from __future__ import annotations

from pathlib import Path


class TokenCounter:
    def __init__(self, model_path: Path):
        # Imported here: transformers is slow to import and only jobs need it.
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.template_failures = 0
        self.longest = 0

    def count(self, example: dict) -> int:
        """The example's length in tokens; also tracks the longest one seen."""
        if "text" in example:
            tokens = self._text_tokens(example["text"])
        else:
            tokens = self._chat_tokens(_messages(example), example.get("tools"))
        self.longest = max(self.longest, tokens)
        return tokens

    def _text_tokens(self, text: str) -> int:
        ids = self.tokenizer.encode(text)
        eos = self.tokenizer.eos_token_id
        return len(ids) + (1 if eos is not None and (not ids or ids[-1] != eos) else 0)

    def _chat_tokens(self, messages: list[dict], tools: list | None) -> int:
        try:
            # return_dict=False: transformers 5 returns a BatchEncoding by default.
            ids = self.tokenizer.apply_chat_template(
                messages, tools=tools, tokenize=True, return_dict=False
            )
            return len(ids)
        except Exception:  # any template error: no template, no tool support, a bad role...
            self.template_failures += 1
            joined = "\n".join(str(message.get("content") or "") for message in messages)
            return len(self.tokenizer.encode(joined))


def _messages(example: dict) -> list[dict]:
    if "messages" in example:
        return example["messages"]
    return [
        {"role": "user", "content": example["prompt"]},
        {"role": "assistant", "content": example["completion"]},
    ]
