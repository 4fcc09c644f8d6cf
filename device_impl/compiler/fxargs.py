"""An FX node's arguments by its op schema's names: what the opaque cutters (``opaque``, ``opaque_cnn``) read to
decide whether a call is cut and with which static options. A leaf module, so both import it without importing
each other."""

from __future__ import annotations

from typing import Any

import torch.fx


def bound(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    values: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            values[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            values[arg.name] = node.kwargs[arg.name]
        else:
            values[arg.name] = arg.default_value if arg.has_default_value() else None
    return values
