"""Policy configuration: the knobs every policy shares (η, B, G) and its sections, one per policy
that has knobs of its own (each defined beside its policy: `dora/sched/policies/<name>_config.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from dora.errors import InputError, too_small


@dataclass
class PolicyConfig:
    """The knobs every policy shares (η, B, G) and one typed section per policy that has its own
    (`sections`, by policy name; read as `cfg.dora`). The section types are those registered
    with their policies (`dora.sched.registry.register`); in YAML and `--set` keys a section sits
    beside the shared knobs: `policy.dora.repartition_load`."""

    eta: int = 4  # staleness bound η: trained at trainer version i only if i - v <= η
    batch_size: int = 128  # B: prompt groups per training step
    group_size: int = 0  # G: samples per prompt; 0 = the trace's
    sections: dict[str, Any] = field(default_factory=dict)  # policy name -> its config; missing ones: defaults

    SECTION_TYPES: ClassVar[dict[str, type]] = {}  # filled by dora.sched.registry.register

    def __post_init__(self) -> None:
        for name in self.sections:
            if name not in self.SECTION_TYPES:
                raise InputError(f"{name}: no policy of that name has a config section; choose from "
                                 f"{', '.join(self.SECTION_TYPES)}")
        given = self.sections
        self.sections = {name: given[name] if given.get(name) is not None else cls()
                         for name, cls in self.SECTION_TYPES.items()}

    def __getattr__(self, name: str) -> Any:
        """A policy's section as an attribute (only called for names that are not fields)."""
        sections = self.__dict__.get("sections")
        if sections is None or name not in sections:
            raise AttributeError(f"PolicyConfig has no field or policy section {name!r}")
        return sections[name]

    @classmethod
    def section_types(cls) -> dict[str, type]:
        """For `dora.config`: the keys besides the fields, each built as a dataclass of its type."""
        return dict(cls.SECTION_TYPES)

    def validate(self) -> None:
        if self.eta < 0:
            raise too_small("eta", self.eta, 0, "(staleness bound in versions)")
        if self.batch_size < 1:
            raise too_small("batch_size", self.batch_size, 1, "prompt group")
        if self.group_size < 0:
            raise too_small("group_size", self.group_size, 1, "sample per prompt",
                            fix="set it to 1 or more, or 0 for the trace's")
