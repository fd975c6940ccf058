"""Reading Kafka's JSON message specs into a small typed model."""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

# Fields Kafka added after the pinned specs in ../shared were taken: ``overlays/<dir>/<Spec>.json`` lists
# them under ``addFields`` and they are appended to that spec's top-level fields.
OVERLAYS = Path(__file__).resolve().parent / "overlays"
# Whole spec files newer than the pinned ones, copied unchanged from Apache Kafka 4.3 (see its README.md):
# ``spec-overlay/<dir>/<Spec>.json`` replaces the base ``<dir>/<Spec>.json`` (or adds it). ``addFields``
# patches apply to base files only.
SPEC_OVERLAY = Path(__file__).resolve().parent / "spec-overlay"

PRIMITIVES = {
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "float64",
    "bool",
    "string",
    "bytes",
    "records",
    "uuid",
}


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; ``hi`` is None for an open range ("3+"). ``lo > hi`` means none."""

    lo: int
    hi: int | None

    @staticmethod
    def parse(text: str | None) -> Versions:
        if text is None or text == "none":
            return Versions(1, 0)
        text = str(text).strip()
        if text.endswith("+"):
            return Versions(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-")
            return Versions(int(lo), int(hi))
        return Versions(int(text), int(text))

    def __contains__(self, v: object) -> bool:
        assert isinstance(v, int)
        return v >= self.lo and (self.hi is None or v <= self.hi)

    @property
    def empty(self) -> bool:
        return self.hi is not None and self.lo > self.hi


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    if keyword.iskeyword(s) or s in {"type", "id", "format", "hash", "len", "all", "any", "filter", "map"}:
        # Builtin-shadowing names are legal attributes; only true keywords need a suffix.
        return s + "_" if keyword.iskeyword(s) else s
    return s


@dataclass
class Field:
    name: str
    type: str
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged_versions: Versions
    flexible_override: Versions | None
    default: object
    ignorable: bool
    about: str
    struct: StructSpec | None = None

    @property
    def py(self) -> str:
        return snake(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass
class StructSpec:
    name: str
    versions: Versions
    fields: list[Field] = field(default_factory=list)
    class_name: str = ""
    about: str = ""


@dataclass
class MessageSpec:
    path: Path
    name: str
    kind: str  # request | response | header | data | coordinator-key | coordinator-value
    api_key: int | None  # for coordinator-key/-value (Kafka 4.0+ record specs): the record type
    valid: Versions
    flexible: Versions
    deprecated: Versions | None
    unstable: bool
    root: StructSpec
    structs: list[StructSpec]  # every struct, children before parents, root last
    notes: list[str]


def _strip_comments(text: str) -> tuple[str, list[str]]:
    """Drop ``//`` comment lines (as Kafka's own generator does) and return the top-level version notes:
    comment lines after the license header that come before the ``fields`` key."""
    body: list[str] = []
    notes: list[str] = []
    seen_brace = False
    in_fields = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            if seen_brace and not in_fields:
                notes.append(stripped[2:].strip())
            continue
        if stripped.startswith("{") and not seen_brace:
            seen_brace = True
        if '"fields"' in stripped or '"commonStructs"' in stripped:
            in_fields = True
        body.append(line)
    while notes and not notes[-1]:
        notes.pop()
    return "\n".join(body), notes


def spec_paths(spec_dir: Path, sub: str) -> list[Path]:
    """The spec files of ``spec_dir/sub`` with the overlay's files of the same directory laid over them
    (same name: the overlay's replaces the base's), sorted by name."""
    files = {p.name: p for p in (spec_dir / sub).glob("*.json")}
    files.update({p.name: p for p in (SPEC_OVERLAY / sub).glob("*.json")})
    return [files[n] for n in sorted(files)]


def record_type(key: MessageSpec) -> range:
    """The record types a ``__consumer_offsets`` key spec covers: the ``apiKey`` of a Kafka 4.0+
    ``coordinator-key``, else (pre-4.0 ``data`` keys) the key's versions."""
    if key.kind == "coordinator-key":
        assert key.api_key is not None
        return range(key.api_key, key.api_key + 1)
    return range(key.valid.lo, (key.valid.hi or key.valid.lo) + 1)


def load(path: Path) -> MessageSpec:
    text, notes = _strip_comments(path.read_text())
    raw = json.loads(text)
    overlay = OVERLAYS / path.parent.name / path.name
    if overlay.exists() and not path.is_relative_to(SPEC_OVERLAY):
        raw["fields"] = [*raw["fields"], *json.loads(overlay.read_text())["addFields"]]
    valid = Versions.parse(raw["validVersions"])
    flexible = Versions.parse(raw.get("flexibleVersions", "none"))
    common: dict[str, StructSpec] = {}
    structs: list[StructSpec] = []

    def parse_fields(items: list[dict[str, object]], outer: Versions) -> list[Field]:
        out = []
        for f in items:
            fv = Versions.parse(str(f["versions"]))
            fld = Field(
                name=str(f["name"]),
                type=str(f["type"]),
                versions=fv,
                nullable=Versions.parse(f.get("nullableVersions")),  # type: ignore[arg-type]
                tag=int(f["tag"]) if "tag" in f else None,  # type: ignore[call-overload]
                tagged_versions=Versions.parse(f.get("taggedVersions")),  # type: ignore[arg-type]
                flexible_override=Versions.parse(str(f["flexibleVersions"]))
                if "flexibleVersions" in f
                else None,
                # A JSON null default is no default, as in Kafka's generator (FieldSpec: null → ""): the field
                # defaults to its type's empty value, so a null value is written (tagged fields: null marker).
                default=f.get("default"),
                ignorable=bool(f.get("ignorable", False)),
                about=str(f.get("about", "")),
            )
            if "fields" in f:
                st = StructSpec(fld.elem, fv, about=fld.about)
                st.fields = parse_fields(f["fields"], fv)  # type: ignore[arg-type]
                structs.append(st)
                fld.struct = st
            out.append(fld)
        return out

    for cs in raw.get("commonStructs", []):
        st = StructSpec(cs["name"], Versions.parse(cs["versions"]))
        st.fields = parse_fields(cs["fields"], st.versions)
        structs.append(st)
        common[st.name] = st

    root = StructSpec(raw["name"], valid)
    root.fields = parse_fields(raw["fields"], valid)

    def link(fields: list[Field]) -> None:
        for fld in fields:
            if fld.struct is None and fld.elem not in PRIMITIVES:
                fld.struct = common[fld.elem]
            if fld.struct is not None:
                link(fld.struct.fields)

    link(root.fields)
    for st in common.values():
        link(st.fields)
    structs.append(root)
    dep = Versions.parse(raw["deprecatedVersions"]) if "deprecatedVersions" in raw else None
    return MessageSpec(
        path=path,
        name=raw["name"],
        kind=raw["type"],
        api_key=raw.get("apiKey"),
        valid=valid,
        flexible=flexible,
        deprecated=dep,
        unstable=bool(raw.get("latestVersionUnstable", False)),
        root=root,
        structs=structs,
        notes=notes,
    )
