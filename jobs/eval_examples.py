"""Evaluation examples: the two shapes that carry answers, beside mlx-lm's formats.

A line of an evaluation file is one of:

- `{"prompt": ..., "choices": [str, ...], "answer": int}`: multiple choice, scored by
  the log-likelihood of each choice after the prompt (the highest wins);
- `{"prompt": ..., "answer": str}`: a short answer, scored by exact match of a greedy
  generation (both sides stripped of spaces and surrounding punctuation, casefolded);
- an example of mlx-lm's formats (messages, prompt and completion, text): it counts
  towards perplexity only.

`prompt` is a string (one user turn) or a list of chat messages ending with the user's
turn, for a system prompt or a few solved examples before the question. Every example
also gives one completion, the tokens perplexity is measured on: the right choice, the
answer, or the assistant's last reply (all of a text).
"""

from __future__ import annotations

import string
from pathlib import Path

from .dataset_examples import check_example, read_checked

MULTIPLE_CHOICE, EXACT_ANSWER, PERPLEXITY_ONLY = "multiple_choice", "exact_answer", "perplexity"
MAX_CHOICES = 10
MAX_ANSWER_CHARS = 200
PROMPT_ROLES = ("system", "user", "assistant")
# What the error for a line of no known shape lists.
SHAPES = (
    "prompt and choices and answer, prompt and answer, prompt and completion, messages, or text"
)
# Stripped from both ends before comparing: "Paris." answers "Paris".
_EDGES = string.whitespace + string.punctuation


def check_eval_example(raw) -> dict:
    """The example with only its shape's keys; ValueError saying what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError("must be a JSON object")
    if "choices" in raw:
        return _multiple_choice(raw)
    if "answer" in raw:
        return _exact_answer(raw)
    example = check_example(raw, _mlx_format(raw))
    if "messages" in example:
        # Perplexity is measured on the last message: end on an assistant reply, as the
        # lab's dataset jobs do (check_example made sure there is one).
        messages = list(example["messages"])
        while messages[-1]["role"] != "assistant":
            messages.pop()
        example["messages"] = messages
    return example


def example_kind(example: dict) -> str:
    if "choices" in example:
        return MULTIPLE_CHOICE
    return EXACT_ANSWER if "answer" in example else PERPLEXITY_ONLY


def prompt_messages(prompt) -> list[dict]:
    """A checked prompt as chat messages: a string is one user turn."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt


def normalise_answer(text: str) -> str:
    """What exact match compares: inner spaces collapsed, edges stripped, casefolded."""
    return " ".join(text.split()).strip(_EDGES).casefold()


def is_exact_match(output: str, answer: str) -> bool:
    return normalise_answer(output) == normalise_answer(answer)


def read_eval_file(path: Path) -> list[dict]:
    """Every example of an evaluation file; JobParamsError naming the bad lines.

    JSONL, or a .json array of examples; a CSV is refused with a hint.
    """
    return read_checked(path, "evaluation", check_eval_example)


def _mlx_format(raw: dict) -> str:
    # mlx-lm's own order of tests (tuner/datasets.py create_dataset).
    if "prompt" in raw and "completion" in raw:
        return "completions"
    if "messages" in raw:
        return "tools" if "tools" in raw else "chat"
    if "text" in raw:
        return "text"
    raise ValueError(f"an example needs {SHAPES}")


def _multiple_choice(raw: dict) -> dict:
    prompt = _prompt(raw.get("prompt"))
    choices = raw["choices"]
    if not isinstance(choices, list) or not 2 <= len(choices) <= MAX_CHOICES:
        raise ValueError(f"choices must be a list of 2 to {MAX_CHOICES} strings")
    if not all(isinstance(choice, str) and choice.strip() for choice in choices):
        raise ValueError("choices must be non-empty strings")
    # Two equal choices would tie: which one "wins" would mean nothing.
    if len(set(choices)) != len(choices):
        raise ValueError("choices must all differ")
    answer = raw.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, int):
        raise ValueError("answer must be the index (from 0) of the right choice")
    if not 0 <= answer < len(choices):
        raise ValueError(f"answer must be between 0 and {len(choices) - 1} (got {answer})")
    return {"prompt": prompt, "choices": choices, "answer": answer}


def _exact_answer(raw: dict) -> dict:
    prompt = _prompt(raw.get("prompt"))
    answer = raw["answer"]
    if not isinstance(answer, str):
        raise ValueError("answer must be a string (an index answer needs choices)")
    if not normalise_answer(answer):
        raise ValueError("answer must have a letter or digit")
    if len(answer) > MAX_ANSWER_CHARS:
        raise ValueError(f"answer must be at most {MAX_ANSWER_CHARS} characters")
    return {"prompt": prompt, "answer": answer}


def _prompt(prompt) -> str | list[dict]:
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("prompt must not be empty")
        return prompt
    if not isinstance(prompt, list) or not prompt:
        raise ValueError("prompt must be a string or a non-empty list of messages")
    for index, message in enumerate(prompt):
        where = f"prompt[{index}]"
        if not isinstance(message, dict) or message.get("role") not in PROMPT_ROLES:
            raise ValueError(f"{where}.role must be one of {', '.join(PROMPT_ROLES)}")
        if not isinstance(message.get("content"), str):
            raise ValueError(f"{where}.content must be a string")
    # The answer is the reply to the last turn: it must be the user's.
    if prompt[-1]["role"] != "user":
        raise ValueError("prompt's last message must be the user's")
    return [{"role": message["role"], "content": message["content"]} for message in prompt]
