"""Records brought to a target schema: the rules first, the model only for what no rule resolves, nothing invented.

The target is a JSON Schema object whose properties say what each field is, by ``"x-normalize": KIND`` (one of
``rules.KINDS``) or by ``"format"`` (``date``, ``date-time``, ``time``). Per-field hints: ``x-unit`` (the target
unit of a ``unit`` field), ``x-currency`` (the default currency of an ``amount`` field), ``x-region`` (the default
phone region). For every record, each hinted field that holds a value is

1. given to its rule (``rules.RULES``); a rule's value is kept;
2. else, when a model is given (``extract``, e.g. ``Client.extract``), asked of the model with a schema-constrained
   extraction of that one field; the model's value is kept only when it is canonical (the rule accepts it as it is)
   and derivable from the raw value (``derivable.py``);
3. else left as it was and flagged.

A field absent or empty is never filled. The normalised record is then validated against the schema; a changed
field the schema refuses is put back and flagged (fail closed). Every change names what made it (a rule, or
``model``).
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError
from . import derivable as D
from .base import Resolved
from .money import ISO_4217
from .rules import (
    COUNTRIES,
    EN_LEVELS,
    KINDS,
    RULES,
    UNITS,
    US_STATES,
    ZH_LEVELS,
    norm_scalar,
)

Extract = Callable[[str, dict[str, Any]], Any]
Mode = Literal["rules", "model", "both"]
_FORMAT_KINDS = {"date": "date", "date-time": "datetime", "time": "time"}


@dataclass(frozen=True)
class NormalizeOptions:
    region: str | None = None  # default phone region (ISO 3166 alpha-2) for numbers without a country code
    currency: str | None = None  # default currency (ISO 4217) for amounts that name none
    dayfirst: bool = False  # 03/05/2021 is 3 May (True) or 5 March (False)
    decimal_comma: bool = False  # 1.234,56 and 1,5 are decimal commas
    mode: Mode = "both"  # rules only, the model only (measuring), or rules then the model

    def check(self) -> None:
        check_region(self.region, "region")
        check_currency(self.currency, "currency")
        if self.mode not in ("rules", "model", "both"):
            raise ConfigError(f"mode {self.mode!r} is not rules, model or both")


def check_region(region: Any, where: str) -> None:
    """A default region (``--region``, a field's ``x-region``): one phone numbers know."""
    if region is None:
        return
    import phonenumbers  # noqa: PLC0415 (the rules' own library: its regions are the ones they can use)

    if not isinstance(region, str) or region not in phonenumbers.SUPPORTED_REGIONS:
        raise ConfigError(f"{where} {region!r} is not a region code phone numbers know",
                          hint="an upper-case ISO 3166 code such as CN, US, GB or DE")


def check_currency(currency: Any, where: str) -> None:
    """A default currency (``--currency``, a field's ``x-currency``): an active ISO 4217 code."""
    if currency is not None and (not isinstance(currency, str) or currency not in ISO_4217):
        raise ConfigError(f"{where} {currency!r} is not an ISO 4217 currency code",
                          hint="an upper-case code such as USD, EUR, CNY or JPY")


DEFAULTS = NormalizeOptions()


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: str
    unit: str | None = None
    currency: str | None = None
    region: str | None = None


@dataclass
class Normalized:
    """One record's result: the record, what changed (and by what), what was flagged, and its validity."""

    record: dict[str, Any]
    changes: list[dict[str, Any]] = field(default_factory=list)
    flags: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors

    def to_json(self) -> dict[str, Any]:
        return {"record": self.record, "changes": self.changes, "flags": self.flags, "valid": self.valid,
                "errors": self.errors}


def field_specs(schema: Any) -> list[FieldSpec]:
    """The hinted fields of a target schema (a ``ConfigError`` for a schema that is not an object of properties)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        raise ConfigError("the target schema is not a JSON Schema object with properties",
                          hint='write {"type": "object", "properties": {"when": {"x-normalize": "date"}, …}}')
    specs = []
    for name, node in schema["properties"].items():
        if not isinstance(node, dict):
            continue
        kind = node.get("x-normalize") or _FORMAT_KINDS.get(str(node.get("format")))
        if kind is None:
            continue
        if kind not in KINDS:
            raise ConfigError(f"field {name!r}: x-normalize {kind!r} is not a known kind",
                              hint=f"use one of {', '.join(KINDS)}")
        unit = node.get("x-unit")
        if kind == "unit" and not isinstance(unit, str):
            raise ConfigError(f"field {name!r}: a unit field needs x-unit, the target unit (e.g. \"kg\")",
                              hint="see docs/normalize.md for the units known")
        if kind == "unit" and str(unit).lower() not in UNITS:
            raise ConfigError(f"field {name!r}: x-unit {unit!r} is not a unit the rules know",
                              hint="see docs/normalize.md for the units known (e.g. kg, km, l)")
        check_currency(node.get("x-currency"), f"field {name!r}: x-currency")
        check_region(node.get("x-region"), f"field {name!r}: x-region")
        specs.append(FieldSpec(name, str(kind), unit, node.get("x-currency"), node.get("x-region")))
    return specs


def scalar_fields(schema: dict[str, Any], hinted: set[str]) -> dict[str, str]:
    """The fields whose schema type is one of integer, number or boolean (and no hint): a text value of theirs
    (every CSV cell) is typed by ``rules.norm_scalar``."""
    out = {}
    for name, node in schema["properties"].items():
        kind = node.get("type") if isinstance(node, dict) else None
        if isinstance(kind, list):  # ["integer", "null"]: how an optional numeric column is declared
            kinds = [k for k in kind if k != "null"]
            kind = kinds[0] if len(kinds) == 1 else None
        if name not in hinted and kind in ("integer", "number", "boolean"):
            out[name] = str(kind)
    return out


def validator(schema: dict[str, Any]) -> Any:
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(f"the target schema is not valid JSON Schema: {exc.message}") from None
    return cls(schema, format_checker=_format_checker(cls.FORMAT_CHECKER))


#: ISO 8601 forms the rules write; the offset optional (kept when the input gave one), so the check holds where
#: jsonschema has no RFC 3339 checker installed as well
_LOCAL_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?")
_LOCAL_TIME = re.compile(r"\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?")


def _format_checker(base: Any) -> Any:
    """The schema's format checker, with ``date-time`` and ``time`` also taking the local forms the rules write
    when the input names no offset (``2021-03-05T14:30:00``, ``15:15:00``): RFC 3339 wants an offset, and one the
    input does not give would be invented (docs/normalize.md)."""
    import datetime as dt

    checker = copy.deepcopy(base)
    strict = {name: checker.checkers.get(name) for name in ("date-time", "time")}

    def local(name: str, pattern: re.Pattern[str], parse: Any) -> None:
        def check(value: object) -> bool:
            if not isinstance(value, str) or (strict[name] is not None and _checker_ok(strict[name], value)):
                return True
            if not pattern.fullmatch(value):
                return False
            parse(value)  # ValueError (month 13, hour 25): not the format
            return True

        checker.checks(name, raises=ValueError)(check)

    local("date-time", _LOCAL_DATETIME, dt.datetime.fromisoformat)
    local("time", _LOCAL_TIME, dt.time.fromisoformat)
    return checker


def _checker_ok(entry: Any, value: str) -> bool:
    func, raises = entry
    try:
        return bool(func(value))
    except raises:
        return False


class Normalizer:
    """Normalises records against one schema (``extract``: the model's extraction, or None for rules only)."""

    def __init__(self, schema: dict[str, Any], options: NormalizeOptions | None = None,
                 extract: Extract | None = None) -> None:
        options = options or DEFAULTS
        options.check()
        self.schema = schema
        self.specs = field_specs(schema)
        self.scalars = scalar_fields(schema, {spec.name for spec in self.specs})
        self.options = options
        self.extract = extract
        self._validator = validator(schema)
        self.stats: Counter[str] = Counter()
        if options.mode != "rules" and extract is None:
            raise ConfigError(f"mode {options.mode!r} asks the model, and no model is given",
                              hint="pass a Client's extract (CLI: --model/--url), or use mode rules")

    def record(self, raw: dict[str, Any]) -> Normalized:
        out = Normalized(copy.deepcopy(raw))
        for spec in self.specs:
            value = raw.get(spec.name)
            if not isinstance(value, str) or not value.strip():
                continue  # absent or empty: never filled in; a number or object: validated as it is
            resolved = self._resolve(spec, value)
            if resolved is None:
                out.flags.append({"field": spec.name, "value": value, "reason": self._why_not(spec)})
                self.stats["flagged"] += 1
                continue
            if resolved.value != value:
                out.record[spec.name] = resolved.value
                out.changes.append({"field": spec.name, "from": value, "to": resolved.value, "by": resolved.rule})
                self.stats["changed"] += 1
        for name, json_type in self.scalars.items():
            value = raw.get(name)
            typed = norm_scalar(value, json_type) if isinstance(value, str) else None
            if typed is not None:  # else left: the schema's check names it
                out.record[name] = typed.value
                out.changes.append({"field": name, "from": value, "to": typed.value, "by": typed.rule})
                self.stats["changed"] += 1
        self._validate(out, raw)
        return out

    def _why_not(self, spec: FieldSpec) -> str:
        if self.options.mode == "rules" or self.extract is None:
            return f"no {spec.kind} rule resolves it (left as it was)"
        article = "an" if spec.kind in ("amount", "address") else "a"  # "neither a amount rule" ("a unit rule")
        return f"neither {article} {spec.kind} rule nor the model resolves it (left as it was)"

    def _resolve(self, spec: FieldSpec, text: str) -> Resolved | None:
        if self.options.mode != "model":
            resolved = self._rule(spec, text)
            if resolved is not None:
                self.stats["by_rule"] += 1
                return resolved
        if self.options.mode == "rules" or self.extract is None:
            return None
        return self._model(spec, text)

    def _rule(self, spec: FieldSpec, text: str) -> Resolved | None:
        o = self.options
        kind = spec.kind
        if kind in ("date", "datetime"):
            return RULES[kind](text, dayfirst=o.dayfirst)
        if kind == "phone":
            return RULES[kind](text, region=spec.region or o.region)
        if kind == "amount":
            return RULES[kind](text, currency=spec.currency or o.currency, decimal_comma=o.decimal_comma)
        if kind == "unit":
            return RULES[kind](text, unit=spec.unit, decimal_comma=o.decimal_comma)
        return RULES[kind](text)

    def _model(self, spec: FieldSpec, text: str) -> Resolved | None:
        assert self.extract is not None
        node, instruction = model_schema(spec, text)
        self.stats["model_calls"] += 1
        try:
            answer = self.extract(f"{spec.name}: {text}\n\n{instruction}",
                                  {"type": "object", "properties": {"value": node}, "required": ["value"]})
        except Exception:  # noqa: BLE001 - a failed extraction is an unresolved field, flagged; never a guess
            self.stats["model_failed"] += 1
            return None
        value = answer.get("value") if isinstance(answer, dict) else None
        if value is None or not self._accept(spec, value, text):
            self.stats["model_refused"] += 1
            return None
        self.stats["by_model"] += 1
        return Resolved(value, "model")

    def _accept(self, spec: FieldSpec, value: Any, raw: str) -> bool:
        """Canonical (the rule takes it as it is) and derivable from ``raw``."""
        kind, region = spec.kind, spec.region or self.options.region
        if kind in ("date", "datetime", "time", "phone"):
            if not isinstance(value, str):
                return False
            again = self._rule(spec, value)
            if again is None or again.value != value:
                return False
            check = {"date": D.date_derivable, "datetime": D.datetime_derivable, "time": D.time_derivable}
            if kind == "phone":
                return D.phone_derivable(value, raw, region)
            return check[kind](value, raw)
        if kind == "amount":
            return D.amount_derivable(value, raw, spec.currency or self.options.currency)
        if kind == "unit":
            return D.unit_derivable(value, raw, spec.unit)
        if kind == "address":
            return (isinstance(value, dict) and any(value.values()) and address_shaped(value)
                    and D.address_derivable(value, raw))
        if not isinstance(value, str) or not value.strip():
            return False
        again = self._rule(spec, value)  # canonical: the name rule leaves it as it is ("DOE, JOHN" is not)
        return (again is not None and again.value == value and D.text_derivable(value, raw)
                and D.name_complete(value, raw))

    def _validate(self, out: Normalized, raw: dict[str, Any]) -> None:
        changed = {c["field"] for c in out.changes}
        for error in self._validator.iter_errors(out.record):
            top = str(error.path[0]) if error.path else None
            if top is not None and top in changed:  # the normalised value breaks the schema: the input goes back
                out.record[top] = raw[top]
                out.changes = [c for c in out.changes if c["field"] != top]
                out.flags.append({"field": top, "value": raw[top],
                                  "reason": f"the normalised value fails the schema ({error.message})"})
                self.stats["reverted"] += 1
        # an empty value of a field the schema does not require is an absent one (a CSV's blank cell): it was
        # checked as a value, and every row with a blank optional date or number was invalid
        required = set(self._validator.schema.get("required") or ())
        present = {k: v for k, v in out.record.items() if not (isinstance(v, str) and not v.strip()) or k in required}
        out.errors = sorted({f"{'/'.join(str(p) for p in e.path) or '(record)'}: {e.message}"
                             for e in self._validator.iter_errors(present)})
        if out.errors:
            self.stats["invalid"] += 1


def model_schema(spec: FieldSpec, raw: str) -> tuple[dict[str, Any], str]:
    """The one-field extraction schema and instruction the model is given for ``spec``."""
    kind = spec.kind
    if kind == "date":
        return {"type": "string", "format": "date"}, "Write this date as YYYY-MM-DD."
    if kind == "datetime":
        return ({"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}$"},
                "Write this date and time as YYYY-MM-DDTHH:MM:SS.")
    if kind == "time":
        return {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}:[0-9]{2}$"}, "Write this time as HH:MM:SS."
    if kind == "phone":
        return ({"type": "string", "pattern": "^\\+[1-9][0-9]{6,14}$"},
                "Write this phone number in E.164 form: + country code, then the digits.")
    if kind == "amount":
        return ({"type": "object", "properties": {"amount": {"type": "number"},
                                                  "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}},
                 "required": ["amount", "currency"]},
                "Give the amount as a number and its ISO 4217 currency code.")
    if kind == "unit":
        return {"type": "number"}, f"Give this quantity as a number of {spec.unit}."
    if kind == "address":
        levels = ZH_LEVELS if re.search(r"[\u4e00-\u9fff]", raw) else EN_LEVELS
        return ({"type": "object", "properties": {k: {"type": "string", "maxLength": 60} for k in levels},
                 "required": list(levels)},
                "Split this address into its parts, copying each part exactly; leave a part empty if it is absent.")
    return {"type": "string", "maxLength": 80}, "Write this person's name as First Last, copied from the text."


_ZH_SUFFIXES = {"province": ("省", "自治区", "特别行政区", "市"), "city": ("市", "自治州", "地区", "盟"),
                "district": ("区", "县", "旗", "市"), "street": ("街道", "镇", "乡")}


def address_shaped(value: dict[str, Any]) -> bool:
    """Each level holds what that level can hold: a US state code in ``state``, a known country in ``country``, a
    Chinese level with its level's suffix — so levels the model shifted (a city in ``street``) are refused."""
    if not all(isinstance(v, str) for v in value.values()):
        return False
    if "province" in value:
        return all(not value.get(level) or str(value[level]).endswith(ends) for level, ends in _ZH_SUFFIXES.items())
    state, country = value.get("state", ""), value.get("country", "")
    if state and state.upper() not in US_STATES:
        return False
    if country and country not in set(COUNTRIES.values()):
        return False
    city = str(value.get("city", ""))
    return bool(city) and city.upper() not in US_STATES and city.casefold() not in COUNTRIES
