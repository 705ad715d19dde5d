"""Tools and tool_choice: the functions a turn may call, and whether it must."""

from __future__ import annotations

import json
from dataclasses import dataclass

from labsettings import lab_settings

from ..errors import ApiError
from .structured import check_schema_size

TOOL_CHOICE_MODES = ("auto", "none", "required")
CHOICE_USAGE = "tool_choice must be 'auto', 'none', 'required' or a function object"


@dataclass(frozen=True)
class ToolPlan:
    tools: list[dict]  # as sent, for the chat template
    names: frozenset[str]
    choice: str  # auto | none | required | the forced function's name

    @property
    def forced(self) -> bool:
        return self.choice not in ("auto", "none")

    @property
    def active(self) -> bool:
        return bool(self.tools) and self.choice != "none"


def _function(tool, index: int) -> dict:
    param = f"tools[{index}]"
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        raise ApiError(f"{param} must be an object with type 'function'", param=param)
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ApiError(f"{param}.function.name must be a string", param=param)
    parameters = function.get("parameters", {"type": "object"})
    if not isinstance(parameters, dict):
        raise ApiError(f"{param}.function.parameters must be a JSON schema object", param=param)
    check_schema_size(json.dumps(parameters), f"{param}.function.parameters")
    return function


NO_TOOLS = ToolPlan(tools=[], names=frozenset(), choice="none")


def parse_tools(body: dict) -> ToolPlan:
    """OpenAI's `tools` and `tool_choice`, as every surface that names them alike sends them."""
    if "tool_choice" in body and body["tool_choice"] is None:  # null is no choice OpenAI knows
        raise ApiError(CHOICE_USAGE, param="tool_choice")
    return tool_plan(body.get("tools"), body.get("tool_choice"))


def tool_plan(tools, choice=None) -> ToolPlan:
    """Function tools in OpenAI's shape, and a choice (None: auto with tools, else none)."""
    tools = [] if tools is None else tools  # {} or "" is a 400 below, not "no tools"
    if not isinstance(tools, list):
        raise ApiError("tools must be an array", param="tools")
    limit = lab_settings.max_tools
    if len(tools) > limit:
        raise ApiError(f"tools may hold at most {limit} tools", param="tools")
    names = frozenset(_function(tool, i)["name"] for i, tool in enumerate(tools))
    if choice is None:
        choice = "auto" if tools else "none"
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if choice.get("type") != "function" or not isinstance(name, str):
            raise ApiError(
                "tool_choice must be 'auto', 'none', 'required' or "
                '{"type": "function", "function": {"name": ...}}',
                param="tool_choice",
            )
        choice = name
        if name not in names:
            raise ApiError(f"tool_choice names an unknown function '{name}'", param="tool_choice")
    elif choice not in TOOL_CHOICE_MODES:
        raise ApiError(CHOICE_USAGE, param="tool_choice")
    if choice == "required" and not tools:
        raise ApiError("tool_choice 'required' needs at least one tool", param="tool_choice")
    return ToolPlan(tools=tools, names=names, choice=choice)
