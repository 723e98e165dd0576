"""The campaign commands' options, generated from the settings tree.

Each option is a settings field with a description: its names, type, choices, help and
default come from that field, so a new setting is one field and its option follows. A small
typer adapter, not a library: typer reads a command's options from its signature, so the
generated options are the signature's parameters (``with_settings_flags``), and typer's
parsing, help and completion stay as they are for every other command. (Generators that own
the whole command line, tyro or pydantic-settings' CLI, would replace typer for three
commands of seventeen and lose the console's help panels.)

The nested name is the canonical spelling (``--ladder.promote``), the one ``--help`` shows
under its component's panel. Each option also keeps the flat spelling users typed before
(``--promote``) as a hidden alias: flat keys are unique by construction
(:data:`~recipelab.agent.setup.settings_components.FLAT_KEYS` refuses two fields spelt alike), so
an alias can never become ambiguous. The CLI reference lists every alias.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from rich.markup import escape

from recipelab.agent.setup.settings import COMPONENTS, CampaignSettings, SettingsError
from recipelab.agent.setup.settings_components import flat_key, parse_edit
from recipelab.cli.common import fail

BUILT_IN_CORPORA = ("python-docs", "python-source")
NOT_GIVEN: tuple[Any, ...] = (None, [], ())  # an option left out (a list: empty)

EARLIER_SPELLINGS = {
    "corpus.source": "--corpus",
    "corpus.max_bytes": "--corpus-max-bytes",
    "window.trial_timeout_s": "--trial-timeout",
    "search.edits": "--edit",
}
"""The flat spellings that are not a field's flat key, by the settings path they set."""

PANELS = {"": "Campaign", "corpus": "Campaign", "window": "Window: when launching stops",
          "ladder": "Ladder and verdict", "search": "Search", "proposer": "Proposer",
          "executor": "Where trials run", "store": "Records"}
"""The help panel of each part of the tree, in the order ``--help`` shows them."""


@dataclass(frozen=True)
class Flag:
    """One option: the settings field it sets and how the command line spells and parses it."""

    path: str  # the field's settings path: ``ladder.promote``, ``corpus.source``, ``preset``
    name: str  # the canonical spelling: ``--ladder.promote``
    alias: str | None  # the flat spelling users typed before: ``--promote``
    parsed_as: Any  # what the command line parses: bool, int, float, str, a Literal, list[str]
    help: str
    panel: str

    @property
    def parameter(self) -> str:
        """The Python name typer passes the value by: ``ladder__promote``."""
        return self.path.replace(".", "__")

    @property
    def alias_parameter(self) -> str:
        """The Python name typer passes the alias's value by: ``ladder__promote__alias``."""
        return f"{self.parameter}__alias"

    def parameters(self) -> list[inspect.Parameter]:
        """The option as typer reads it from a signature, and its hidden alias."""
        found = [self._parameter(self.parameter, self.name, hidden=False)]
        if self.alias is not None:
            found.append(self._parameter(self.alias_parameter, self.alias, hidden=True))
        return found

    def _parameter(self, parameter: str, name: str, *, hidden: bool) -> inspect.Parameter:
        decl = f"{name}/{no_name(name)}" if self.parsed_as is bool else name  # --x/--no-x
        option = typer.Option(decl, help=escape(self.help), rich_help_panel=self.panel,
                              show_default=False, hidden=hidden)
        return inspect.Parameter(parameter, inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation=Annotated[self.parsed_as | None, option])

    def value(self, values: Mapping[str, Any]) -> Any:
        """The value given under either spelling; one error line when both are given."""
        value, alias = values.get(self.parameter), values.get(self.alias_parameter)
        if value in NOT_GIVEN:
            return None if alias in NOT_GIVEN else alias
        if alias not in NOT_GIVEN and alias != value:
            fail(f"{self.name} {value!r} and its alias {self.alias} {alias!r} are both given: "
                 "give one of them")
        return value


def no_name(name: str) -> str:
    """A switch's negative spelling: ``--ladder.no-horizon-rule``, ``--no-horizon-rule``."""
    head, dot, leaf = name[2:].rpartition(".")
    return f"--{head}{dot}no-{leaf}"


def setting_default(path: str) -> Any:
    """The default of the settings field at ``path`` as a bare campaign has it: the parent's
    default as the campaign sets it (the corpus: python-source), not its class's."""
    first, *rest = path.split(".")
    field = CampaignSettings.model_fields[first]
    if field.is_required():
        raise ValueError(f"the setting {path} has no default: every campaign gives its own")
    value: Any = field.get_default(call_default_factory=True)
    for part in rest:
        value = getattr(value, part)
    return value


def shown(value: Any) -> str:
    """A default as a person reads it: on/off, 1,000, 600, tpe."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def description(path: str) -> str:
    """The description of the settings field at ``path``."""
    return next(str(field.description) for at, field in _described_fields() if at == path)


def help_text(path: str, field: FieldInfo) -> str:
    """The field's description and its default, read from the field: ``(default: 2)``, or
    what an unset default comes to (``default_means``), never restated by hand."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    means = extra.get("default_means")
    default = setting_default(path)
    if default in (None, ()):
        if default is None and means is None:
            raise ValueError(f"the setting {path} defaults to None: say what that means "
                             "(json_schema_extra={'default_means': ...})")
        return f"{field.description} (default: {means})" if means else str(field.description)
    return f"{field.description} (default: {shown(default)}{f', {means}' if means else ''})"


def parsed_as(annotation: Any) -> Any:
    """How the command line reads a field of ``annotation``: a literal as its choices, a
    tuple as a repeatable option, a union pydantic parses from text (``int | 'auto'``) as
    text."""
    options = list(get_args(annotation)) if get_origin(annotation) in (Union, types.UnionType) \
        else [annotation]
    options = [get_args(option)[0] if get_origin(option) is Annotated else option
               for option in options if option is not type(None)]
    if len(options) == 1:
        (option,) = options
        if get_origin(option) is tuple:
            return list[str]
        if get_origin(option) is Literal or option in (bool, int, float, str):
            return option
    return str


def _described_fields() -> Iterable[tuple[str, FieldInfo]]:
    """Every settings field a person sets, by path: the described ones, walked one level
    into the components and the corpus."""
    for name, field in CampaignSettings.model_fields.items():
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            for leaf, inner in model.model_fields.items():
                if inner.description:
                    yield f"{name}.{leaf}", inner
        elif field.description:
            yield name, field


def _alias(path: str) -> str | None:
    """The flat spelling of the option at ``path``, or None where it is the canonical one
    (the campaign's identity: ``--preset``)."""
    head, _, leaf = path.rpartition(".")
    if path in EARLIER_SPELLINGS:
        return EARLIER_SPELLINGS[path]
    return "--" + flat_key(head, leaf).replace("_", "-") if head in COMPONENTS else None


@functools.cache
def settings_flags() -> tuple[Flag, ...]:
    """Every setting's option, in the order of the settings tree (built once: the settings
    classes do not change while the program runs)."""
    return tuple(Flag(path, "--" + path.replace("_", "-"), _alias(path), parsed_as(field.annotation),
                      help_text(path, field), PANELS[path.rpartition(".")[0]])
                 for path, field in _described_fields())


Command = TypeVar("Command", bound=Callable[..., Any])


def with_settings_flags(paths: Sequence[str] | None = None, *,
                        saved: bool = False) -> Callable[[Command], Command]:
    """A decorator giving a command the options of the settings at ``paths`` (every setting
    when None), after its own; the command takes them as ``**settings`` and reads them with
    :func:`given_settings`. ``saved``: the command works on a saved campaign, so an option
    left out keeps the campaign's value, and the help says so instead of the default."""
    def decorate(command: Command) -> Command:
        own = [parameter for parameter in
               inspect.signature(command, eval_str=True).parameters.values()
               if parameter.kind is not inspect.Parameter.VAR_KEYWORD]
        chosen = [flag for flag in settings_flags() if paths is None or flag.path in paths]
        if saved:
            chosen = [replace(flag, help=f"{description(flag.path)} (default: the "
                                          "campaign's)") for flag in chosen]
        missing = set(paths or ()) - {flag.path for flag in chosen}
        if missing:
            raise ValueError(f"no settings field with a description at {sorted(missing)}")
        command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [*own, *(parameter for flag in chosen for parameter in flag.parameters())])
        return command
    return decorate


def corpus_source(text: str) -> str:
    """A corpus as given: a path made absolute, so a resume from another directory reads
    the same files; the built-in names stay names."""
    return text if text in BUILT_IN_CORPORA else str(Path(text).expanduser().resolve())


def _edits(texts: list[str]) -> tuple[dict[str, Any], ...]:
    try:
        return tuple(parse_edit(text) for text in texts)
    except SettingsError as error:
        fail(str(error))


CONVERTED: dict[str, Callable[[Any], Any]] = {
    "corpus.source": corpus_source,
    "search.edits": _edits,
    "search.calibrate_from": lambda paths: tuple(str(Path(p).resolve()) for p in paths),
}
"""Settings typed as text that is no value yet: paths made absolute (the campaign reads
them later, from wherever it is resumed), edits parsed from JSON."""


def given_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """The settings the options given set, nested by path (``{"ladder": {"promote": 2}}``),
    for the settings to validate; options not given are left out, so a resume keeps the
    saved values."""
    nested: dict[str, Any] = {}
    for flag in settings_flags():
        value = flag.value(values)
        if value is None:
            continue
        value = CONVERTED[flag.path](value) if flag.path in CONVERTED else (
            tuple(value) if isinstance(value, list) else value)
        *parents, leaf = flag.path.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested
