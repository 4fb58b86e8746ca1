"""Plain records: the results and rows loom passes around, as classes with slots.

Equality, hashing and repr go by the fields, as a frozen dataclass's or a NamedTuple's
would. Neither is used on the cold paths (search, grep, get, scan): making a dataclass
costs a cold command ~2.5 M instructions and `import dataclasses` ~43 M more (inspect,
ast), and typing.NamedTuple needs `import typing`, ~41 M — together more than half of
what a cold `loom grep` executed (docs/benchmarks.md, "Cold start"). The modules on those
paths import typing only for the type checker (`TYPE_CHECKING = False`, which mypy treats
as typing's).
"""

from __future__ import annotations


class Record:
    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and type(other) is type(self) and (
            self._values() == other._values())

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def _asdict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}
