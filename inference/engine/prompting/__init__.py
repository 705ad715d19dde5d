"""A wire call made a generation request: the chat template, the grammar, the output
parser (reasoning and tool calls), the checks against the model's context and caches."""
