"""Dataset examples in mlx-lm's four formats: checking one, and reading an uploaded file.

What is kept of each example is only its format's keys: mlx-lm guesses a file's format
from its first line (prompt+completion, then messages, then text), so a stray key
could make it read a chat file as completions.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from pathlib import Path

from .context import JobParamsError

FORMATS = ("chat", "tools", "completions", "text")
ROLES = ("system", "user", "assistant", "tool")
MAX_REPORTED_ERRORS = 20
CSV_COLUMNS = {"completions": ("prompt", "completion"), "text": ("text",)}


def check_example(example, fmt: str) -> dict:
    """The example with only its format's keys; ValueError saying what is wrong."""
    if not isinstance(example, dict):
        raise ValueError("must be a JSON object")
    if fmt in ("chat", "tools"):
        kept = {"messages": _check_messages(example.get("messages"), fmt)}
        if fmt == "tools":
            kept["tools"] = _check_tools(example.get("tools"))
        return kept
    if fmt == "completions":
        for key in ("prompt", "completion"):
            if not isinstance(example.get(key), str):
                raise ValueError(f"{key} must be a string")
        return {"prompt": example["prompt"], "completion": example["completion"]}
    # mlx-lm's text loader reads the last token of each encoded text: "" would crash it.
    if not isinstance(example.get("text"), str) or not example["text"]:
        raise ValueError("text must be a non-empty string")
    return {"text": example["text"]}


def _check_messages(messages, fmt: str) -> list:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise ValueError(f"{where} must be an object")
        if message.get("role") not in ROLES:
            raise ValueError(f"{where}.role must be one of {', '.join(ROLES)}")
        # A tool-calling assistant turn may carry only tool_calls, as in mlx-lm's example.
        calls_only = fmt == "tools" and message["role"] == "assistant" and "tool_calls" in message
        if calls_only:
            _check_tool_calls(message["tool_calls"], where)
            if message.get("content") is not None and not isinstance(message["content"], str):
                raise ValueError(f"{where}.content must be a string")
        elif not isinstance(message.get("content"), str):
            raise ValueError(f"{where}.content must be a string")
    if not any(message["role"] == "assistant" for message in messages):
        raise ValueError("messages must include an assistant message")
    return messages


def _check_tool_calls(calls, where: str) -> None:
    if not isinstance(calls, list) or not calls:
        raise ValueError(f"{where}.tool_calls must be a non-empty list")
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"{where}.tool_calls[{index}].function.name must be a string")


def _check_tools(tools) -> list:
    if not isinstance(tools, list) or not tools:
        raise ValueError("tools must be a non-empty list")
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise ValueError(f'{where}.type must be "function"')
        function = tool.get("function")
        if not isinstance(function, dict):
            raise ValueError(f"{where}.function must be an object")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError(f"{where}.function.name must be a non-empty string")
        if "parameters" in function and not isinstance(function["parameters"], dict):
            raise ValueError(f"{where}.function.parameters must be an object")
    return tools


def read_upload(path: Path, fmt: str) -> list[dict]:
    """Every example of an uploaded file, checked; JobParamsError naming the bad lines."""
    return read_checked(path, fmt, lambda raw: check_example(raw, fmt))


def read_checked(path: Path, fmt: str, check: Callable[[object], dict]) -> list[dict]:
    """Every record of a file passed through `check`, whose ValueError marks a bad line;
    JobParamsError naming the bad lines (the first MAX_REPORTED_ERRORS of them)."""
    examples, errors, bad = [], [], 0
    try:
        for where, raw in _records(path, fmt):
            try:
                if isinstance(raw, ValueError):
                    raise raw
                examples.append(check(raw))
            except ValueError as error:
                bad += 1
                if len(errors) < MAX_REPORTED_ERRORS:
                    errors.append(f"{where}: {error}")
    except UnicodeDecodeError as error:
        raise JobParamsError(f"the file is not UTF-8 text ({error.reason})") from None
    if errors:
        more = bad - len(errors)
        raise JobParamsError("; ".join(errors) + (f"; and {more} more bad lines" if more else ""))
    if not examples:
        raise JobParamsError("the upload has no examples")
    return examples


def _records(path: Path, fmt: str) -> Iterator[tuple[str, object]]:
    """(where, parsed record or the ValueError that parsing raised), skipping blank lines."""
    if path.suffix == ".csv":
        yield from _csv_records(path, fmt)
        return
    with open(path, encoding="utf-8-sig") as handle:
        first = handle.read(1)
        while first.isspace():
            first = handle.read(1)
        handle.seek(0)
        if path.suffix == ".json" and first == "[":
            yield from _array_records(handle)
            return
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield f"line {number}", _parse_json(line)


def _parse_json(text: str):
    try:
        return json.loads(text)
    except ValueError as error:
        return ValueError(f"not valid JSON ({getattr(error, 'msg', error)})")


def _array_records(handle) -> Iterator[tuple[str, object]]:
    # A .json upload may also be one array of examples, as many exports are.
    data = _parse_json(handle.read())
    if isinstance(data, ValueError):
        raise JobParamsError(f"the file is {data}")
    for index, item in enumerate(data):
        yield f"item {index + 1}", item


def _csv_records(path: Path, fmt: str) -> Iterator[tuple[str, object]]:
    if fmt not in CSV_COLUMNS:
        raise JobParamsError(f"the {fmt} format cannot be read from CSV; upload JSONL instead")
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, [])
        missing = [column for column in CSV_COLUMNS[fmt] if column not in header]
        if missing:
            raise JobParamsError(
                f"the CSV header lacks column(s) {', '.join(missing)} needed by the {fmt} format"
                f" (it has: {', '.join(header) or 'nothing'})"
            )
        positions = {column: header.index(column) for column in CSV_COLUMNS[fmt]}
        end = reader.line_num
        for row in reader:
            # Where the row starts: a quoted field may span several physical lines.
            where, end = f"line {end + 1}", reader.line_num
            if not any(value.strip() for value in row):
                continue
            short = [column for column, at in positions.items() if at >= len(row)]
            if short:
                yield where, ValueError(f"missing value for {', '.join(short)}")
            else:
                yield where, {column: row[at] for column, at in positions.items()}
