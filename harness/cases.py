"""The case model: everything needed to run one differential check again, as plain data."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.values import TensorSpec


@dataclass(frozen=True)
class Case:
    spec: str  # the op spec's name (harness.specs.SPECS)
    dtype: str
    tensors: tuple[TensorSpec, ...]
    params: dict[str, Any] = field(default_factory=dict)
    mode: str = "eager"
    device: str = "neuron"
    source: str = "spec"  # "spec" (our strategies) or "opinfo" (PyTorch's op_db)

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        return [t.shape for t in self.tensors]

    @property
    def layouts(self) -> list[str]:
        return [t.layout for t in self.tensors]

    @property
    def domains(self) -> list[str]:
        return [t.domain for t in self.tensors]

    def to_json(self) -> str:
        data = asdict(self)
        data["tensors"] = [t.to_dict() for t in self.tensors]
        data["params"] = {k: _encode(v) for k, v in self.params.items()}
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> "Case":
        data = json.loads(text)
        data["tensors"] = tuple(TensorSpec.from_dict(t) for t in data["tensors"])
        data["params"] = {k: _from_jsonable(v) for k, v in data["params"].items()}
        return cls(**data)


def _encode(value: Any) -> Any:
    """JSON keeps lists but not tuples; dims and shapes must come back as tuples."""
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _from_jsonable(value: Any) -> Any:
    if isinstance(value, dict) and "__tuple__" in value:
        return tuple(_from_jsonable(v) for v in value["__tuple__"])
    if isinstance(value, list):
        return [_from_jsonable(v) for v in value]
    return value
