#!/usr/bin/env python3
"""Generates megatron/megatron_flags.inc: every option Megatron-LM's parse_args accepts, read from a
Megatron-LM checkout with Python's `ast` (nothing of Megatron-LM is imported, so no torch needed).

Run from the repository root (Python 3.11+, standard library only):

    python3 scripts/megatron_options.py --megatron ~/src/Megatron-LM
    python3 scripts/megatron_options.py --megatron /tmp/megatron \\
        --commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 --date 2026-08-22

--commit and --date default to `git -C PATH log -1` when PATH is a git work tree. --out defaults to
megatron/megatron_flags.inc, written to a temporary file and then renamed; the script prints which
flags the new table adds and drops compared with the file it replaces. To compare the table with
the parser Megatron-LM builds at run time (needs a Python with torch):

    python scripts/megatron_options_check.py --megatron ~/src/Megatron-LM

What it replays: parse_args and every `_add_*` function it reaches in
megatron/training/arguments.py, taking each `add_argument` call; and, for each
`ArgumentGroupFactory(SomeConfig, exclude=[...]).build_group(...)`, the fields of that dataclass
and of its base dataclasses (resolved across megatron/) turned into options by the rules of
megatron/training/argument_utils.py: `--field-name`; the type from the annotation (Optional[X] ->
X, list[X] -> nargs '+', Literal -> choices, Enum -> member names); bool fields -> store_true, or,
when the default is not False, store_false spelled `--no-field` and `--disable-field`; and the
field's metadata["argparse_meta"] overriding all of that. The extra_args_provider passed by
pretrain_gpt.py, pretrain_hybrid.py and pretrain_mamba.py (which runs pretrain_hybrid.py) adds its
options too. Choices and defaults that name module-level constants, enums or comprehensions over
them are resolved; a default computed at run time (os.getenv...) is kept as its source text.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import dataclasses
import enum
import importlib
import os
import pathlib
import re
import subprocess
import sys
import tempfile
from typing import Any, Iterable

ENTRY_SCRIPTS = ("pretrain_gpt.py", "pretrain_hybrid.py", "pretrain_mamba.py")
ARGUMENTS_MODULE = "megatron.training.arguments"
FACTORY_QUALNAME = "megatron.training.argument_utils.ArgumentGroupFactory"
# Builtins the evaluator may call: pure functions of already-resolved values.
PURE_BUILTINS = {"list", "tuple", "set", "frozenset", "sorted", "dict", "len", "min", "max",
                 "str", "int", "float", "bool", "range", "reversed"}
SWITCH_ACTIONS = {"store_true", "store_false", "store_const", "append_const", "count", "help",
                  "version", "boolean_optional"}


class GeneratorError(Exception):
    """Something parse_args would do that this script cannot replay; the table would be wrong."""


class Unresolved(Exception):
    """An expression whose value is not known statically (a call, an environment variable...)."""


# ------------------------------------------------------------------------------------------------
# Values the evaluator produces for things defined in Megatron (never imported, so modelled).

@dataclasses.dataclass(frozen=True)
class Ref:
    """A function or class of Megatron (or a third-party module) known only by name."""
    qualname: str
    kind: str  # "module", "function", "class", or "opaque" (torch.dtype, F.gelu...)


@dataclasses.dataclass(eq=False)
class EnumClass:
    """An enum.Enum subclass defined in Megatron, with its members in definition order."""
    qualname: str
    members: list  # EnumMember, aliases excluded (as iter(Enum) does)
    by_name: dict

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    def __iter__(self):
        return iter(self.members)


@dataclasses.dataclass(frozen=True, eq=False)
class EnumMember:
    owner: EnumClass
    name: str
    value: Any

    def __repr__(self) -> str:
        return f"<{self.owner.name}.{self.name}: {self.value!r}>"


@dataclasses.dataclass(frozen=True)
class EnumHandler:
    """The `type=` ArgumentGroupFactory gives an Enum field (a closure: config_type[name])."""
    enum_class: Any


def is_enum_class(obj) -> bool:
    return isinstance(obj, EnumClass) or (isinstance(obj, type) and issubclass(obj, enum.Enum))


def is_enum_member(obj) -> bool:
    return isinstance(obj, (EnumMember, enum.Enum))


# ------------------------------------------------------------------------------------------------
# Source tree: modules by dotted name, their top-level definitions and imports.

@dataclasses.dataclass
class Module:
    name: str
    path: pathlib.Path
    tree: ast.Module
    defs: dict  # top-level name -> ast node (ClassDef, FunctionDef, or the assigned value expr)
    imports: dict  # top-level local name -> dotted target ("pkg.mod" or "pkg.mod.attr")


class SourceTree:
    """Parses Megatron modules on demand; imports anywhere outside functions count (try/if)."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.modules: dict[str, Module | None] = {}

    def module_file(self, name: str) -> pathlib.Path | None:
        base = self.root.joinpath(*name.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def get(self, name: str) -> Module | None:
        if name not in self.modules:
            path = self.module_file(name)
            self.modules[name] = self._load(name, path) if path else None
        return self.modules[name]

    def _load(self, name: str, path: pathlib.Path) -> Module:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
        is_package = path.name == "__init__.py"
        defs, imports = {}, {}
        for node in top_level_statements(tree.body):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[node.name] = node
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                if isinstance(node.targets[0], ast.Name):
                    defs[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                if isinstance(node.target, ast.Name):
                    defs[node.target.id] = node.value
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imports.update(import_bindings(node, name, is_package))
        return Module(name, path, tree, defs, imports)


def top_level_statements(body: list) -> Iterable[ast.stmt]:
    """Module statements, descending into if/try blocks (imports are often guarded) but not defs."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try, getattr(ast, "TryStar", ast.Try), ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from top_level_statements(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from top_level_statements(handler.body)


def import_bindings(node, module_name: str, is_package: bool) -> dict:
    """Local name -> dotted target for one import statement (relative imports made absolute)."""
    out = {}
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                out[alias.asname] = alias.name
            else:
                out[alias.name.split(".")[0]] = alias.name.split(".")[0]
        return out
    package = module_name.split(".") if is_package else module_name.split(".")[:-1]
    if node.level:
        package = package[: len(package) - (node.level - 1)] if node.level > 1 else package
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    for alias in node.names:
        if alias.name != "*":
            out[alias.asname or alias.name] = f"{base}.{alias.name}"
    return out


# ------------------------------------------------------------------------------------------------
# Evaluation of expressions: literals, arithmetic, names of constants/enums/classes, comprehensions.

class Scope:
    """Where a name is looked up: local bindings (function variables), the module, builtins."""

    def __init__(self, tree: SourceTree, module: Module, local: dict | None = None):
        self.tree, self.module, self.local = tree, module, dict(local or {})

    def child(self, extra: dict) -> "Scope":
        return Scope(self.tree, self.module, {**self.local, **extra})


class Evaluator:
    def __init__(self, tree: SourceTree):
        self.tree = tree
        self.cache: dict = {}
        self.in_progress: set = set()

    # -- names ---------------------------------------------------------------------------------
    def lookup(self, name: str, scope: Scope):
        if name in scope.local:
            value = scope.local[name]
            if isinstance(value, Unresolved):
                raise value
            return value
        module = scope.module
        if name in module.defs:
            return self.module_attr(module, name)
        if name in module.imports:
            return self.resolve_dotted(module.imports[name])
        if name in ("None", "True", "False"):
            return {"None": None, "True": True, "False": False}[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise Unresolved(name)

    def module_attr(self, module: Module, name: str):
        key = (module.name, name)
        if key in self.cache:
            return self.cache[key]
        if key in self.in_progress:
            raise Unresolved(f"{module.name}.{name} (recursive)")
        self.in_progress.add(key)
        try:
            value = self._define(module, name)
        finally:
            self.in_progress.discard(key)
        self.cache[key] = value
        return value

    def _define(self, module: Module, name: str):
        node = module.defs.get(name)
        qualname = f"{module.name}.{name}"
        if node is None:
            if name in module.imports:
                return self.resolve_dotted(module.imports[name])
            raise Unresolved(qualname)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return Ref(qualname, "function")
        if isinstance(node, ast.ClassDef):
            if self.class_is_enum(node, module):
                return self.build_enum(node, module)
            return Ref(qualname, "class")
        return self.eval(node, Scope(self.tree, module))

    def resolve_dotted(self, dotted: str):
        """'pkg.mod.attr.sub' -> value: the longest prefix that is a Megatron module, then attrs."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = self.tree.get(".".join(parts[:cut]))
            if module is None:
                continue
            if cut == len(parts):
                return Ref(dotted, "module")
            value = self.module_attr(module, parts[cut])
            for attr in parts[cut + 1:]:
                value = self.attribute(value, attr)
            return value
        return self.resolve_foreign(parts)

    def resolve_foreign(self, parts: list):
        """Standard-library names are imported (enum classes, argparse actions, constants);
        anything else (torch...) stays an opaque name."""
        top = parts[0]
        if top not in sys.stdlib_module_names:
            return Ref(".".join(parts), "opaque")
        try:
            value = importlib.import_module(top)
            for attr in parts[1:]:
                value = getattr(value, attr)
        except (ImportError, AttributeError):
            return Ref(".".join(parts), "opaque")
        return self.accept_foreign(value, ".".join(parts))

    @staticmethod
    def accept_foreign(value, dotted: str):
        # Only inert values are let through (classes, enum members, constants, typing forms):
        # calling a stdlib function such as os.getenv at generation time would bake this
        # machine's environment into the table, so functions become names (Ref).
        if isinstance(value, (type, enum.Enum, int, float, str, bytes, tuple, frozenset, bool,
                              type(None))) or getattr(value, "__module__", None) == "typing":
            return value
        if isinstance(value, type(os)):
            return Ref(dotted, "module")
        if callable(value):
            canonical = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
            return Ref(canonical if "." in canonical.strip(".") else dotted, "function")
        return Ref(dotted, "opaque")

    def attribute(self, value, attr: str):
        if isinstance(value, Ref) and value.kind == "module":
            return self.resolve_dotted(f"{value.qualname}.{attr}")
        if isinstance(value, Ref):
            return Ref(f"{value.qualname}.{attr}", "opaque")
        if isinstance(value, EnumClass):
            if attr in value.by_name:
                return value.by_name[attr]
            raise Unresolved(f"{value.qualname}.{attr}")
        if isinstance(value, EnumMember):
            if attr in ("name", "value"):
                return getattr(value, attr)
            raise Unresolved(f"{value!r}.{attr}")
        if isinstance(value, (enum.Enum, enum.EnumMeta)):  # a stdlib enum: signal.Signals
            try:
                return self.accept_foreign(getattr(value, attr), attr)
            except AttributeError as exc:
                raise Unresolved(attr) from exc
        raise Unresolved(attr)

    # -- enums ---------------------------------------------------------------------------------
    def class_is_enum(self, node: ast.ClassDef, module: Module) -> bool:
        for base in node.bases:
            try:
                value = self.eval(base, Scope(self.tree, module))
            except Unresolved:
                continue
            if is_enum_class(value) or value is enum.Enum:
                return True
        return False

    def build_enum(self, node: ast.ClassDef, module: Module) -> EnumClass:
        scope = Scope(self.tree, module)
        is_str_enum = any(self._is_str_base(base, scope) for base in node.bases)
        cls = EnumClass(f"{module.name}.{node.name}", [], {})
        last = 0
        for stmt in node.body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)):
                continue
            name = stmt.targets[0].id
            if name.startswith("_"):
                continue  # _ignore_, _order_, private helpers are not members
            if self._is_auto(stmt.value, scope):
                value = name.lower() if is_str_enum else last + 1
            else:
                value = self.eval(stmt.value, scope)
            if isinstance(value, int) and not isinstance(value, bool):
                last = value
            member = EnumMember(cls, name, value)
            alias_of = next((m for m in cls.members if m.value == value), None)
            cls.by_name[name] = alias_of or member
            if alias_of is None:
                cls.members.append(member)
        return cls

    def _is_auto(self, expr, scope) -> bool:
        if not isinstance(expr, ast.Call):
            return False
        try:
            return self.eval(expr.func, scope) is enum.auto
        except Unresolved:
            return False

    def _is_str_base(self, base, scope) -> bool:
        try:
            value = self.eval(base, scope)
        except Unresolved:
            return False
        return value is str or value is getattr(enum, "StrEnum", None)

    # -- expressions ---------------------------------------------------------------------------
    def eval(self, node: ast.AST, scope: Scope):
        method = getattr(self, "eval_" + type(node).__name__, None)
        if method is None:
            raise Unresolved(ast.unparse(node))
        return method(node, scope)

    def eval_Constant(self, node, scope):
        return node.value

    def eval_Name(self, node, scope):
        return self.lookup(node.id, scope)

    def eval_Attribute(self, node, scope):
        return self.attribute(self.eval(node.value, scope), node.attr)

    def eval_List(self, node, scope):
        return [self.eval(e, scope) for e in node.elts]

    def eval_Tuple(self, node, scope):
        return tuple(self.eval(e, scope) for e in node.elts)

    def eval_Set(self, node, scope):
        return {self.eval(e, scope) for e in node.elts}

    def eval_Dict(self, node, scope):
        if any(k is None for k in node.keys):
            raise Unresolved(ast.unparse(node))  # {**other}
        return {self.eval(k, scope): self.eval(v, scope) for k, v in zip(node.keys, node.values)}

    def eval_UnaryOp(self, node, scope):
        operand = self.eval(node.operand, scope)
        ops = {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Not: lambda v: not v,
               ast.Invert: lambda v: ~v}
        return self._apply(ops[type(node.op)], operand)

    def eval_BinOp(self, node, scope):
        left, right = self.eval(node.left, scope), self.eval(node.right, scope)
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
               ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
               ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
               ast.Pow: lambda a, b: a ** b}
        if type(node.op) not in ops:
            raise Unresolved(ast.unparse(node))
        return self._apply(ops[type(node.op)], left, right)

    def eval_Compare(self, node, scope):
        ops = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
               ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
               ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
               ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
               ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b}
        left = self.eval(node.left, scope)
        for op, right_node in zip(node.ops, node.comparators):
            right = self.eval(right_node, scope)
            if not ops[type(op)](left, right):
                return False
            left = right
        return True

    def eval_BoolOp(self, node, scope):
        want = isinstance(node.op, ast.Or)  # `or` stops at the first true value, `and` at false
        value = None
        for operand in node.values:
            value = self.eval(operand, scope)
            if bool(value) == want:
                return value
        return value

    def eval_IfExp(self, node, scope):
        branch = node.body if self.eval(node.test, scope) else node.orelse
        return self.eval(branch, scope)

    @staticmethod
    def _apply(fn, *args):
        plain = (int, float, str, list, tuple, bool)
        if not all(isinstance(a, plain) for a in args):
            raise Unresolved("operation on a non-literal value")
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - any failure means "not static"
            raise Unresolved(str(exc)) from exc

    def eval_ListComp(self, node, scope):
        return list(self._comprehension(node, scope))

    def eval_SetComp(self, node, scope):
        return set(self._comprehension(node, scope))

    def eval_GeneratorExp(self, node, scope):
        return list(self._comprehension(node, scope))

    def _comprehension(self, node, scope):
        results = []

        def loop(generators, inner):
            if not generators:
                results.append(self.eval(node.elt, inner))
                return
            gen = generators[0]
            if not isinstance(gen.target, ast.Name):
                raise Unresolved(ast.unparse(gen.target))
            for item in self.eval(gen.iter, inner):
                bound = inner.child({gen.target.id: item})
                if all(self.eval(cond, bound) for cond in gen.ifs):
                    loop(generators[1:], bound)

        loop(node.generators, scope)
        return results

    def eval_Call(self, node, scope):
        func = self.eval(node.func, scope)
        name = getattr(func, "__name__", None)
        if not (callable(func) and getattr(builtins, name or "", None) is func
                and name in PURE_BUILTINS):
            raise Unresolved(ast.unparse(node))
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise Unresolved(ast.unparse(node))
        args = [self.eval(a, scope) for a in node.args]
        if any(k.arg is None for k in node.keywords):
            raise Unresolved(ast.unparse(node))
        kwargs = {k.arg: self.eval(k.value, scope) for k in node.keywords}
        try:
            return func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            raise Unresolved(ast.unparse(node)) from exc

    def eval_Lambda(self, node, scope):
        raise Unresolved(ast.unparse(node))

    def value_or_source(self, node, scope):
        """The value when static; otherwise the source text (the table then shows that text)."""
        try:
            return self.eval(node, scope)
        except Unresolved:
            return SourceText(ast.unparse(node))


@dataclasses.dataclass(frozen=True)
class SourceText:
    """A default that is not static, kept as its Python source."""
    text: str


# ------------------------------------------------------------------------------------------------
# Type annotations -> argparse kwargs, as ArgumentGroupFactory._extract_type does at run time.

class TypeInferenceError(Exception):
    """Mirrors argument_utils.TypeInferenceError: the annotation has no argparse form."""


@dataclasses.dataclass(frozen=True)
class TypeForm:
    """A resolved annotation: origin None for plain classes, else 'union', 'list', 'literal' or
    another generic (dict, tuple, Callable...) that argparse cannot take."""
    origin: str | None
    args: tuple = ()
    cls: Any = None  # for origin None: int, str, an EnumClass, a Ref...


NONE_TYPE = TypeForm(None, cls=type(None))
GENERIC_ORIGINS = {  # typing names whose get_origin() is a non-None class
    "typing.List": "list", "typing.Dict": "dict", "typing.Tuple": "tuple", "typing.Set": "set",
    "typing.Callable": "callable", "typing.ContextManager": "contextmanager",
    "typing.Sequence": "sequence", "typing.Type": "type", "typing.FrozenSet": "frozenset",
    "collections.abc.Callable": "callable",
}


class AnnotationReader:
    def __init__(self, evaluator: Evaluator):
        self.ev = evaluator

    def read(self, node, scope: Scope) -> TypeForm:
        if isinstance(node, ast.Constant) and node.value is None:
            return NONE_TYPE
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            # A string annotation stays a str at run time; argparse would reject it as a type.
            return TypeForm(None, cls=Ref(f"'{node.value}'", "opaque"))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return make_union([self.read(node.left, scope), self.read(node.right, scope)])
        if isinstance(node, ast.Subscript):
            return self.read_subscript(node, scope)
        return self.read_plain(node, scope)

    def read_plain(self, node, scope) -> TypeForm:
        try:
            value = self.ev.eval(node, scope)
        except Unresolved:
            return TypeForm(None, cls=Ref(ast.unparse(node), "opaque"))
        name = typing_name(value)
        if name in GENERIC_ORIGINS:
            return TypeForm(GENERIC_ORIGINS[name])  # bare List/Callable: get_origin() is set
        if name == "typing.Any":
            return TypeForm(None, cls=Ref("typing.Any", "opaque"))
        return TypeForm(None, cls=value)

    def read_subscript(self, node, scope) -> TypeForm:
        try:
            head = self.ev.eval(node.value, scope)
        except Unresolved:
            return TypeForm("generic")
        name = typing_name(head)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if name == "typing.Optional":
            return make_union([self.read(items[0], scope), NONE_TYPE])
        if name == "typing.Union":
            return make_union([self.read(i, scope) for i in items])
        if name == "typing.Literal":
            return TypeForm("literal", tuple(self.literal_values(items, scope)))
        if head is list or name == "typing.List":
            return TypeForm("list", tuple(self.read(i, scope) for i in items))
        return TypeForm(GENERIC_ORIGINS.get(name, "generic"))

    def literal_values(self, items, scope) -> list:
        values = []
        for item in items:
            if isinstance(item, ast.Subscript) and typing_name(
                    self.ev.eval(item.value, scope)) == "typing.Literal":
                values += self.literal_values(item.slice.elts if isinstance(
                    item.slice, ast.Tuple) else [item.slice], scope)
            else:
                values.append(self.ev.eval(item, scope))
        return values


def typing_name(value) -> str | None:
    """'typing.List' for typing.List, whether it came from `typing` or a Ref of it."""
    if isinstance(value, Ref):
        return value.qualname
    module = getattr(value, "__module__", None)
    name = getattr(value, "_name", None) or getattr(value, "__name__", None)
    if module in ("typing", "collections.abc") and name:
        return f"{module}.{name}"
    return None


def qualname_of(value) -> str:
    """Dotted name of a class, function or typing form, for identity tests across imports."""
    name = typing_name(value)
    if name:
        return name
    if isinstance(value, type) or callable(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
    return ""


def make_union(args: list) -> TypeForm:
    """typing.Union / X | Y semantics: nested unions flatten, duplicates drop, one arg collapses."""
    flat = []
    for arg in args:
        for item in (arg.args if arg.origin == "union" else (arg,)):
            if item not in flat:
                flat.append(item)
    return flat[0] if len(flat) == 1 else TypeForm("union", tuple(flat))


def extract_type(form: TypeForm) -> dict:
    """ArgumentGroupFactory._extract_type, on resolved annotations."""
    if form.origin is None and is_enum_class(form.cls):
        return {"type": EnumHandler(form.cls), "choices": list(form.cls)}
    if form.origin is None:
        return {"type": form.cls}
    if form.origin == "union":
        if form.args[1] == NONE_TYPE:
            return extract_type(form.args[0])
        raise TypeInferenceError(f"Unions not supported by argparse: {form}")
    if form.origin == "list":
        if len(form.args) == 1:
            return {**extract_type(form.args[0]), "nargs": "+"}
        raise TypeInferenceError(f"Multi-type lists not supported by argparse: {form}")
    if form.origin == "literal":
        kinds = {type(v) for v in form.args}
        if len(kinds) != 1:
            raise GeneratorError(f"Literal with mixed types fails an assert in Megatron: {form}")
        return {"type": kinds.pop(), "choices": form.args}
    raise TypeInferenceError(f"Unsupported type: {form}")


# ------------------------------------------------------------------------------------------------
# Dataclasses: fields (with inheritance) and ArgumentGroupFactory's add_argument kwargs per field.

MISSING = object()


@dataclasses.dataclass
class FieldInfo:
    name: str
    annotation: ast.AST
    scope: Scope
    default: Any = MISSING  # ast node, or MISSING
    default_factory: Any = MISSING  # ast node, or MISSING
    init: bool = True
    metadata: Any = None  # ast node of metadata=, or None


class Dataclasses:
    def __init__(self, tree: SourceTree, evaluator: Evaluator):
        self.tree, self.ev = tree, evaluator
        self.annotations = AnnotationReader(evaluator)

    def class_node(self, qualname: str) -> tuple[ast.ClassDef, Module]:
        module_name, _, name = qualname.rpartition(".")
        module = self.tree.get(module_name)
        node = module.defs.get(name) if module else None
        if not isinstance(node, ast.ClassDef):
            raise GeneratorError(f"cannot find class {qualname}")
        return node, module

    def is_dataclass(self, node: ast.ClassDef, module: Module) -> bool:
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            try:
                value = self.ev.eval(target, Scope(self.tree, module))
            except Unresolved:
                continue
            if qualname_of(value) == "dataclasses.dataclass":
                return True
        return False

    def fields(self, qualname: str) -> list[FieldInfo]:
        """dataclasses.fields(): base classes' fields first; a redefinition keeps its place."""
        node, module = self.class_node(qualname)
        collected: dict[str, FieldInfo] = {}
        for base in reversed(node.bases):
            base_value = self.ev.eval(base, Scope(self.tree, module))
            if isinstance(base_value, Ref) and base_value.kind == "class":
                base_node, base_module = self.class_node(base_value.qualname)
                if self.is_dataclass(base_node, base_module):
                    collected.update({f.name: f for f in self.fields(base_value.qualname)})
        if not self.is_dataclass(node, module):
            raise GeneratorError(f"{qualname} is not a dataclass")
        for stmt in node.body:
            info = self.own_field(stmt, module)
            if info is not None:
                collected[info.name] = info
        return list(collected.values())

    def own_field(self, stmt, module: Module) -> FieldInfo | None:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            return None
        scope = Scope(self.tree, module)
        head = stmt.annotation
        head = head.value if isinstance(head, ast.Subscript) else head
        try:
            kind = qualname_of(self.ev.eval(head, scope))
        except Unresolved:
            kind = ""
        if kind.endswith("ClassVar") or kind.endswith("InitVar"):
            return None  # not fields (InitVar is an __init__ parameter, not in fields())
        info = FieldInfo(stmt.target.id, stmt.annotation, scope)
        value = stmt.value
        if value is not None and isinstance(value, ast.Call) and self._is_field_call(value, scope):
            for kw in value.keywords:
                if kw.arg == "default":
                    info.default = kw.value
                elif kw.arg == "default_factory":
                    info.default_factory = kw.value
                elif kw.arg == "init":
                    info.init = bool(self.ev.eval(kw.value, scope))
                elif kw.arg == "metadata":
                    info.metadata = kw.value
        elif value is not None:
            info.default = value
        return info

    def _is_field_call(self, call: ast.Call, scope) -> bool:
        try:
            return qualname_of(self.ev.eval(call.func, scope)) == "dataclasses.field"
        except Unresolved:
            return False

    def factory_default(self, info: FieldInfo):
        """attribute.default_factory(): list -> [], a lambda -> its body, else the source text."""
        node = info.default_factory
        if isinstance(node, ast.Lambda):
            return self.ev.value_or_source(node.body, info.scope)
        call = ast.Call(func=node, args=[], keywords=[])
        return self.ev.value_or_source(call, info.scope)

    def argparse_meta(self, info: FieldInfo) -> dict | None:
        if info.metadata is None:
            return None
        if not isinstance(info.metadata, ast.Dict):
            raise GeneratorError(f"metadata of {info.name} is not a dict literal")
        for key, value in zip(info.metadata.keys, info.metadata.values):
            if isinstance(key, ast.Constant) and key.value == "argparse_meta":
                if not isinstance(value, ast.Dict) or None in value.keys:
                    raise GeneratorError(f"argparse_meta of {info.name} is not a dict literal")
                return {self.ev.eval(k, info.scope): self.ev.value_or_source(v, info.scope)
                        for k, v in zip(value.keys, value.values)}
        return None

    def field_kwargs(self, owner: str, info: FieldInfo) -> dict:
        """ArgumentGroupFactory._build_argparse_kwargs_from_field."""
        kwargs = {"arg_names": [format_arg_name(info.name)], "dest": info.name}
        if info.default is MISSING and info.default_factory is not MISSING:
            kwargs["default"] = self.factory_default(info)
        elif info.default is MISSING:
            raise GeneratorError(f"{owner}.{info.name} has no default (Megatron would fail)")
        else:
            kwargs["default"] = self.ev.value_or_source(info.default, info.scope)
        meta = self.argparse_meta(info)
        try:
            kwargs.update(extract_type(self.annotations.read(info.annotation, info.scope)))
            if kwargs["type"] is bool:
                self._bool_action(kwargs, info)
        except TypeInferenceError as exc:
            if meta is None:
                raise GeneratorError(f"{owner}.{info.name}: {ast.unparse(info.annotation)} has no "
                                     "argparse form and no argparse_meta (Megatron raises too)"
                                     ) from exc
        if meta is not None:
            kwargs.update(meta)
        return kwargs

    def _bool_action(self, kwargs: dict, info: FieldInfo) -> None:
        # `attribute.default == False`: a default_factory leaves default MISSING -> store_false.
        default = MISSING if info.default is MISSING else kwargs["default"]
        if isinstance(default, SourceText):
            raise GeneratorError(f"bool field {info.name} has a non-static default")
        kwargs["action"] = "store_true" if (default is not MISSING and default == False) \
            else "store_false"  # noqa: E712 - mirrors Megatron's comparison
        kwargs.pop("type")
        if kwargs["action"] == "store_false":
            kwargs["arg_names"] = [format_arg_name(info.name, "no"),
                                   format_arg_name(info.name, "disable")]


def format_arg_name(name: str, prefix: str | None = None) -> str:
    """ArgumentGroupFactory._format_arg_name."""
    if prefix:
        name = prefix + "_" + name
    return "--" + name.replace("_", "-")


# ------------------------------------------------------------------------------------------------
# argparse: what add_argument(*names, **kwargs) registers.

@dataclasses.dataclass
class Option:
    names: list
    dest: str
    action: str
    nargs: Any
    type: Any
    choices: Any
    default: Any
    origin: str  # "add_argument" or the dataclass's name
    where: str  # file:line of the call, for messages
    conditional: str = ""  # why it may be absent at run time ("" when always registered)
    section: str = ""  # the parser function that registers it ("logging" for _add_logging_args)


def make_option(names: list, kwargs: dict, origin: str, where: str,
                conditional: str = "") -> Option:
    if not names or not all(isinstance(n, str) and n.startswith("-") for n in names):
        raise GeneratorError(f"{where}: positional or dynamic option names {names!r}")
    for key in ("action", "nargs", "dest", "choices"):
        if isinstance(kwargs.get(key), SourceText):  # only defaults may stay source text
            raise GeneratorError(f"{where}: {key}={kwargs[key].text} is not static")
    action = kwargs.get("action", "store")
    if action is argparse.BooleanOptionalAction:
        action = "boolean_optional"
        names = boolean_optional_names(names)
    elif not isinstance(action, str):
        raise GeneratorError(f"{where}: unknown action {action!r}")
    default_by_action = {"store_true": False, "store_false": True}
    return Option(
        names=list(names), dest=kwargs.get("dest") or derive_dest(names), action=action,
        nargs=kwargs.get("nargs"), type=kwargs.get("type"), choices=kwargs.get("choices"),
        default=kwargs.get("default", default_by_action.get(action)), origin=origin,
        where=where, conditional=conditional)


def section_of(function_name: str) -> str:
    """_add_logging_args -> logging: which part of the parser an option belongs to (ptdp uses it
    to tell options that cannot change a step's time or memory from those it does not model)."""
    name = function_name.removeprefix("_").removeprefix("add_").removesuffix("_args")
    return name.removesuffix("_arguments")


def boolean_optional_names(names: list) -> list:
    """argparse.BooleanOptionalAction (Python 3.11) adds --no-NAME after each --NAME."""
    out = []
    for name in names:
        out.append(name)
        if name.startswith("--"):
            out.append("--no-" + name[2:])
    return out


def derive_dest(names: list) -> str:
    """argparse: the first long option string, else the first one, without dashes."""
    long_names = [n for n in names if len(n) > 1 and n[1] == "-"]
    return (long_names or names)[0].lstrip("-").replace("-", "_")


def help_option() -> Option:
    """ArgumentParser(add_help=True) registers -h/--help itself."""
    return Option(["-h", "--help"], "help", "help", 0, None, None, "==SUPPRESS==",
                  "add_argument", "argparse.ArgumentParser")


# ------------------------------------------------------------------------------------------------
# Walking arguments.py (and the scripts' extra_args_provider functions).

class ParserWalker:
    def __init__(self, tree: SourceTree):
        self.tree = tree
        self.ev = Evaluator(tree)
        self.dataclasses = Dataclasses(tree, self.ev)
        self.options: list[Option] = []
        self.skipped: list[Option] = []  # behind an `if` that is statically False
        self.visited: set = set()
        self.factory_classes: list[str] = []

    def function(self, module: Module, name: str) -> ast.FunctionDef:
        node = module.defs.get(name)
        if not isinstance(node, ast.FunctionDef):
            raise GeneratorError(f"no function {name} in {module.path}")
        return node

    def walk_function(self, module: Module, node: ast.FunctionDef, conditional: str = "") -> None:
        """Every add_argument / build_group call in the function, in source order, following calls
        to parser-building functions of the same module (the _add_*_args chain)."""
        key = (module.name, node.name)
        if key in self.visited:
            return
        self.visited.add(key)
        scope = self.function_scope(module, node)
        for call, branch in calls_in_order(node):
            guard = guard_of(self.tree, node, branch) if branch else Guard("true", "")
            callee = call.func
            is_add = isinstance(callee, ast.Attribute) and callee.attr == "add_argument"
            if guard.state == "false":
                if is_add:  # never registered; the header names it
                    self.skipped.append(self.add_argument_call(call, scope, module, guard.text))
                continue
            reason = conditional or (guard.text if guard.state == "runtime" else "")
            first_new = len(self.options)
            if is_add:
                self.options.append(self.add_argument_call(call, scope, module, reason))
            elif isinstance(callee, ast.Attribute) and callee.attr == "build_group":
                self.build_group_call(call, scope, module, reason)
            elif isinstance(callee, ast.Name) and self.builds_parser(module, callee.id):
                self.walk_function(module, self.function(module, callee.id), reason)
            for option in self.options[first_new:]:
                option.section = option.section or section_of(node.name)

    @staticmethod
    def builds_parser(module: Module, name: str) -> bool:
        node = module.defs.get(name)
        return isinstance(node, ast.FunctionDef) and (
            name.startswith("_add_") or name.startswith("add_")) and bool(node.args.args)

    def function_scope(self, module: Module, node: ast.FunctionDef) -> Scope:
        """Locals that matter: imports inside the function and simple `name = expr` bindings
        (an `exclude` list, a factory object)."""
        scope = Scope(self.tree, module)
        for stmt in ast.walk(node):
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for local, target in import_bindings(stmt, module.name, False).items():
                    scope.local[local] = self.safe(lambda t=target: self.ev.resolve_dotted(t))
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                    stmt.targets[0], ast.Name):
                scope.local[stmt.targets[0].id] = self.local_value(stmt.value, scope)
        return scope

    def local_value(self, expr, scope: Scope):
        if isinstance(expr, ast.Call) and self.is_factory(expr.func, scope):
            return FactoryCall(expr)
        return self.safe(lambda: self.ev.eval(expr, scope))

    @staticmethod
    def safe(fn):
        try:
            return fn()
        except Unresolved as exc:
            return exc

    def is_factory(self, func, scope: Scope) -> bool:
        try:
            value = self.ev.eval(func, scope)
        except Unresolved:
            return False
        return isinstance(value, Ref) and value.qualname == FACTORY_QUALNAME

    def add_argument_call(self, call: ast.Call, scope: Scope, module: Module, conditional: str):
        where = f"{module.path.name}:{call.lineno}"
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords):
            raise GeneratorError(f"{where}: *args/**kwargs in add_argument")
        names = [self.ev.eval(a, scope) for a in call.args]
        kwargs = {}
        for kw in call.keywords:
            if kw.arg in ("help", "metavar", "required"):
                continue
            kwargs[kw.arg] = self.ev.value_or_source(kw.value, scope)
        return make_option(names, kwargs, "add_argument", where, conditional)

    def build_group_call(self, call: ast.Call, scope: Scope, module: Module, conditional: str):
        target = call.func.value
        if isinstance(target, ast.Call) and self.is_factory(target.func, scope):
            factory = FactoryCall(target)
        elif isinstance(target, ast.Name) and isinstance(scope.local.get(target.id), FactoryCall):
            factory = scope.local[target.id]
        else:
            return  # another object's build_group: not ArgumentGroupFactory
        self.factory_options(factory.call, scope, f"{module.path.name}:{call.lineno}", conditional)

    def factory_options(self, call: ast.Call, scope: Scope, where: str, conditional: str):
        """ArgumentGroupFactory(cls, exclude=...).build_group(): one add_argument per field."""
        cls = self.ev.eval(call.args[0], scope)
        if not (isinstance(cls, Ref) and cls.kind == "class"):
            raise GeneratorError(f"{where}: no dataclass {ast.unparse(call.args[0])}")
        exclude_node = call.args[1] if len(call.args) > 1 else next(
            (k.value for k in call.keywords if k.arg == "exclude"), None)
        exclude = set(self.ev.eval(exclude_node, scope) or []) if exclude_node else set()
        short = cls.qualname.rsplit(".", 1)[-1]
        self.factory_classes.append(short)
        for info in self.dataclasses.fields(cls.qualname):
            if info.name in exclude or not info.init:
                continue
            kwargs = self.dataclasses.field_kwargs(short, info)
            names = kwargs.pop("arg_names")
            self.options.append(make_option(names, kwargs, short, f"{where} ({short}.{info.name})",
                                            conditional))

    # -- the scripts ---------------------------------------------------------------------------
    def extra_args_providers(self, script: str, seen: set | None = None) -> list:
        """(script, module, function) for each extra_args_provider a script passes, following
        runpy.run_path(...'other.py') (pretrain_mamba.py runs pretrain_hybrid.py)."""
        seen = seen if seen is not None else set()
        if script in seen:
            return []
        seen.add(script)
        module = self.tree.get(script[:-3])
        if module is None:
            return []
        found = []
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg == "extra_args_provider":
                    found += [(script, module, n) for n in provider_names(kw.value)]
            if isinstance(node.func, ast.Attribute) and node.func.attr == "run_path":
                for const in ast.walk(node):
                    if isinstance(const, ast.Constant) and str(const.value).endswith(".py"):
                        found += self.extra_args_providers(const.value, seen)
        return found


@dataclasses.dataclass(frozen=True)
class FactoryCall:
    call: ast.Call


def provider_names(expr) -> list:
    """`f`, or `f if cond else None`: the function names that may be passed."""
    if isinstance(expr, ast.IfExp):
        return provider_names(expr.body) + provider_names(expr.orelse)
    return [expr.id] if isinstance(expr, ast.Name) else []


@dataclasses.dataclass(frozen=True)
class Branch:
    """The `if` around a call: its test, and whether the call is in the body or the else."""
    test: ast.expr
    taken_when: bool


@dataclasses.dataclass(frozen=True)
class Guard:
    """Whether a branch runs: "true"/"false" when known statically, else "runtime"."""
    state: str
    text: str


def guard_of(tree: SourceTree, func: ast.FunctionDef, branch: Branch) -> Guard:
    """`if HAVE_X` after `try: from m import HAVE_X` is decided by m: static when m assigns
    HAVE_X exactly once, at top level, to a constant (Megatron's public kitchen stub sets
    HAVE_KITCHEN = False); otherwise the branch runs only when m imports (or does not)."""
    test, taken = branch.test, branch.taken_when
    if isinstance(test, ast.Name):
        module = try_imported_from(func, test.id)
        if module is not None:
            value = single_constant(tree.get(module), test.id)
            if value is not None:
                state = "true" if bool(value) == taken else "false"
                negation = "" if taken else "not "
                return Guard(state, f"{negation}{module}.{test.id}, which that module sets to "
                                    f"{value!r}")
            verb = "imports" if taken else "does not import"
            return Guard("runtime", f"only when {module} {verb} (in {func.name})")
    negation = "" if taken else "not "
    return Guard("runtime", f"only when `{negation}{ast.unparse(test)}` (in {func.name})")


def try_imported_from(func: ast.FunctionDef, name: str) -> str | None:
    """The module a `try: from m import name` inside the function imports name from."""
    for node in ast.walk(func):
        for stmt in node.body if isinstance(node, ast.Try) else []:
            if isinstance(stmt, ast.ImportFrom) and any(
                    (a.asname or a.name) == name for a in stmt.names):
                return stmt.module
    return None


def single_constant(module: Module | None, name: str):
    """The constant a module binds `name` to, when it does so once and unconditionally."""
    if module is None:
        return None
    stores = [n for n in ast.walk(module.tree) if isinstance(n, ast.Name) and n.id == name
              and isinstance(n.ctx, ast.Store)]
    top = [s for s in module.tree.body if isinstance(s, ast.Assign) and len(s.targets) == 1
           and isinstance(s.targets[0], ast.Name) and s.targets[0].id == name]
    if len(stores) == 1 and len(top) == 1 and isinstance(top[0].value, ast.Constant):
        return top[0].value.value
    return None


def calls_in_order(func: ast.FunctionDef) -> list:
    """(call, branch) for every call in the function, in source order; branch is the outermost
    `if` it sits under (None when the call always runs). Nested defs are not entered."""
    found = []

    def visit(node, branch):
        if node is not func and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                  ast.Lambda, ast.ClassDef)):
            return
        if isinstance(node, ast.If):
            visit(node.test, branch)
            for child in node.body:
                visit(child, branch or Branch(node.test, True))
            for child in node.orelse:
                visit(child, branch or Branch(node.test, False))
            return
        if isinstance(node, ast.Call):
            found.append((node, branch))
        for child in ast.iter_child_nodes(node):
            visit(child, branch)

    visit(func, None)
    found.sort(key=lambda item: (item[0].lineno, item[0].col_offset))
    return found


# ------------------------------------------------------------------------------------------------
# Collecting everything and writing the table.

@dataclasses.dataclass
class Collected:
    options: list  # Option, registration order
    classes: list  # dataclass names, registration order
    scripts: list  # (script, the script that passes it, provider qualname)
    skipped: list  # Option never registered: its `if` is statically False


def collect(root: pathlib.Path) -> Collected:
    tree = SourceTree(root)
    walker = ParserWalker(tree)
    arguments = tree.get(ARGUMENTS_MODULE)
    if arguments is None:
        raise GeneratorError(f"{root} has no megatron/training/arguments.py")
    walker.options.append(help_option())
    walker.walk_function(arguments, walker.function(arguments, "parse_args"))
    scripts = []
    for script in ENTRY_SCRIPTS:
        for origin, module, name in walker.extra_args_providers(script):
            qualname = module.imports.get(name, f"{module.name}.{name}")
            provider_module = tree.get(qualname.rpartition(".")[0])
            if provider_module is None:
                raise GeneratorError(f"{origin}: cannot find {qualname}")
            scripts.append((script, origin, qualname))
            node = walker.function(provider_module, qualname.rpartition(".")[2])
            guard = f"by the scripts' extra_args_provider {qualname}" + provider_guard(
                tree, module, name)
            walker.walk_function(provider_module, node, guard)
    check_conflicts(walker.options)
    return Collected(walker.options, walker.factory_classes, scripts, walker.skipped)


# Packages every Megatron-LM install has; a try-import failing for want of them is not the point.
BASE_REQUIREMENTS = {"torch", "numpy", "yaml", "packaging", "megatron"}


def provider_guard(tree: SourceTree, script: Module, name: str) -> str:
    """', only when <packages> import' when the script imports the provider inside a try block
    whose other imports need packages beyond Megatron's base requirements."""
    for node in ast.walk(script.tree):
        if not isinstance(node, ast.Try):
            continue
        modules = [s.module for s in node.body if isinstance(s, ast.ImportFrom) and s.module]
        if not any(isinstance(s, ast.ImportFrom) and any((a.asname or a.name) == name
                                                        for a in s.names) for s in node.body):
            continue
        needs = set()
        for module_name in modules:
            module = tree.get(module_name)
            for target in (module.imports.values() if module else []):
                top = target.split(".")[0]
                if top not in sys.stdlib_module_names and top not in BASE_REQUIREMENTS:
                    needs.add(top)
        if needs:
            return f", only when `import {', '.join(sorted(needs))}` works"
        return ", only when its try-import succeeds"
    return ""


def check_conflicts(options: list) -> None:
    """argparse raises on an option string registered twice; so must we (a modelling error)."""
    seen = {}
    for option in options:
        for name in option.names:
            if name in seen:
                raise GeneratorError(f"{name} registered twice: {seen[name]} and {option.where}")
            seen[name] = option.where


def arity(option: Option) -> str:
    if option.action in SWITCH_ACTIONS:
        return "kSwitch"
    if option.nargs is None:
        return "kOne"
    if option.nargs == "?":
        return "kOptional"
    if option.nargs in ("+", "*", "...", "A...") or isinstance(option.nargs, int):
        return "kMany"
    raise GeneratorError(f"{option.where}: nargs={option.nargs!r}")


def type_word(option: Option) -> str:
    if option.action in ("store_true", "store_false", "boolean_optional"):
        return "bool"
    if option.action == "count":
        return "int"
    if option.action in SWITCH_ACTIONS:
        return "other"  # help, version, store_const, append_const
    kind = option.type
    if kind is None or kind is str:
        return "str"
    if kind in (int, float, bool):
        return kind.__name__
    if isinstance(kind, EnumHandler):
        return "enum"
    if kind is pathlib.Path or isinstance(kind, argparse.FileType) or (
            isinstance(kind, Ref) and kind.qualname.endswith("Path")):
        return "path"
    return "other"


def type_label(kind) -> str:
    if isinstance(kind, Ref):
        return kind.qualname.rsplit(".", 1)[-1]
    if isinstance(kind, EnumHandler):
        cls = kind.enum_class
        return f"{cls.__name__ if isinstance(cls, type) else cls.name}[name]"
    return getattr(kind, "__name__", repr(kind))


def py_repr(value) -> str:
    """repr(), except enum members print as their names (what the command line takes)."""
    if isinstance(value, SourceText):
        return value.text
    if is_enum_member(value):
        return value.name
    if isinstance(value, list):
        return "[" + ", ".join(py_repr(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(py_repr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def choices_text(choices) -> str:
    if choices is None:
        return ""
    return "|".join(v.name if is_enum_member(v) else str(v) for v in choices)


def cpp_string(text: str) -> str:
    out = []
    for char in text:
        if char in '\\"':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\{ord(char):03o}")  # octal: a \x escape would swallow following hex
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def table_rows(options: list) -> list:
    rows = []
    for option in options:
        fields = (arity(option), type_word(option), choices_text(option.choices),
                  py_repr(option.default), option.section)
        rows += [(name, option, fields) for name in option.names]
    return sorted(rows, key=lambda row: row[0])


def header(collected: Collected, rows: list, commit: str, date: str) -> list:
    options = collected.options
    from_args = sum(len(o.names) for o in options if o.origin == "add_argument")
    from_classes = len(rows) - from_args
    classes = ", ".join(dict.fromkeys(collected.classes))
    lines = [
        "Generated by scripts/megatron_options.py from NVIDIA/Megatron-LM at commit "
        f"{commit} ({date}).",
        f"{len(rows)} options: {from_args} from add_argument calls, {from_classes} from config "
        f"dataclasses ({classes}).",
        f"One line per option string ({len(options)} argparse actions): aliases, --no-/--disable- "
        "forms and argparse.BooleanOptionalAction's --no- twins each get a line with their "
        "action's data. -h/--help, which argparse adds itself, counts as add_argument.",
        "Fields: name, arity, type, choices ('|'-joined), default, section (the parser function "
        "that registers it, without _add_ and _args: 'logging', 'network_size'). Arity: kSwitch (no value: "
        "store_true/store_false/BooleanOptionalAction/help), kOne, kOptional (nargs='?'), kMany "
        "(nargs '+', '*' or a count: values up to the next --option).",
        "Type: the value's argparse type: int, float, str (also no type=), bool (a switch, or a "
        "value parsed by type=bool, which is true for any non-empty word), enum (an Enum field: "
        "the value is a member name; choices and default print member names), path "
        "(pathlib.Path/FileType), other (a function of arguments.py parses the value, listed "
        "below; also -h/--help).",
        "Default: repr() of the action's own default; when several options share a dest, the "
        "first registered one's default is what argparse puts in the namespace.",
    ]
    lines += provider_lines(collected)
    skipped: dict = {}
    for option in collected.skipped:
        skipped.setdefault(option.conditional, []).extend(option.names)
    lines += [f"Not listed: {' '.join(names)}, registered only if {reason}."
              for reason, names in skipped.items()]
    lines += not_static_lines(options)
    return ["// " + line for line in wrap_lines(lines)]


def provider_lines(collected: Collected) -> list:
    by_provider: dict = {}
    for script, origin, qualname in collected.scripts:
        via = "" if script == origin else f" (which runs {origin})"
        by_provider.setdefault(qualname, []).append(script + via)
    lines = [f"Included: the options of {qualname}, the extra_args_provider of "
             f"{', '.join(scripts)}." for qualname, scripts in by_provider.items()]
    scanned = ", ".join(ENTRY_SCRIPTS)
    lines.append(f"Scripts scanned for an extra_args_provider: {scanned}. Not included: other "
                 "scripts' own options (pretrain_vlm.py, train_rl.py, tasks/*, examples/*, "
                 "tools/*).")
    return lines


def not_static_lines(options: list) -> list:
    lines = ["Not determinable statically: --yaml-cfg loads further settings from a file; "
             "validate_args later rewrites many values."]
    guarded: dict = {}
    for option in options:
        if option.conditional:
            guarded.setdefault(option.conditional, []).extend(option.names)
    for reason, names in guarded.items():
        lines.append(f"Registered {reason}: {' '.join(names)} (listed).")
    sources = [f"{o.names[0]}={o.default.text}" for o in options
               if isinstance(o.default, SourceText)]
    if sources:
        lines.append("Defaults computed when Megatron runs, kept as source text: "
                     + ", ".join(sources) + ".")
    others = [f"{o.names[0]} ({type_label(o.type)})" for o in options if type_word(o) == "other"
              and o.action not in SWITCH_ACTIONS]
    if others:
        lines.append("Type 'other' (a function parses the value): " + ", ".join(others) + ".")
    enums = [f"{o.names[0]} ({type_label(o.type)})" for o in options if type_word(o) == "enum"]
    if enums:
        lines.append("Enum-typed: " + ", ".join(enums) + "; a stdlib enum's members (signal."
                     f"Signals) are those of the Python that ran the generator ({sys.platform}).")
    return lines


def wrap_lines(lines: list, width: int = 97) -> list:
    """Wrap header prose at spaces; the first two lines stay whole (their format is fixed)."""
    out = lines[:2]
    for line in lines[2:]:
        words, current = line.split(" "), ""
        for word in words:
            if current and len(current) + 1 + len(word) > width:
                out.append(current)
                current = "  " + word
            else:
                current = f"{current} {word}" if current else word
        out.append(current)
    return out


def render(collected: Collected, commit: str, date: str) -> str:
    rows = table_rows(collected.options)
    lines = header(collected, rows, commit, date)
    lines += [f"#define PTDP_MEGATRON_COMMIT {cpp_string(commit)}",
              f"#define PTDP_MEGATRON_COMMIT_DATE {cpp_string(date)}",
              "#define PTDP_MEGATRON_FLAGS \\"]
    for i, (name, _, (arity_, kind, choices, default, section)) in enumerate(rows):
        end = "," if i == len(rows) - 1 else ", \\"
        lines.append(f"  {{{cpp_string(name)}, FlagArity::{arity_}, {cpp_string(kind)}, "
                     f"{cpp_string(choices)}, {cpp_string(default)}, {cpp_string(section)}}}{end}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# Command line.

def git_commit_and_date(path: pathlib.Path) -> tuple[str, str] | None:
    try:
        out = subprocess.run(["git", "-C", str(path), "log", "-1", "--format=%H %cs"],
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return (out[0], out[1]) if len(out) == 2 else None


def write_atomically(path: pathlib.Path, text: str) -> None:
    """Temp file in the same directory, then rename: readers never see half a table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes it 0600; a source file is not
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def flag_names(text: str) -> set:
    return set(re.findall(r'^\s*\{"(-[^"]*)", FlagArity::', text, re.MULTILINE))


def report_changes(old_text: str, new_text: str) -> None:
    old = flag_names(old_text.split("PTDP_LAUNCHER_FLAGS")[0])
    new = flag_names(new_text)
    gone, added = sorted(old - new), sorted(new - old)
    print(f"megatron_options: {len(new)} options; {len(added)} new, {len(gone)} gone since the "
          "previous table", file=sys.stderr)
    for label, names in (("gone", gone), ("new", added)):
        if names:
            print(f"  {label}: {' '.join(names)}", file=sys.stderr)


def parse_command_line(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megatron", required=True, type=pathlib.Path,
                        help="a Megatron-LM checkout (the directory holding megatron/)")
    parser.add_argument("--commit", help="its commit (default: git -C PATH log -1)")
    parser.add_argument("--date", help="the commit's date, YYYY-MM-DD (default: from git)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("megatron/megatron_flags.inc"))
    args = parser.parse_args(argv)
    if args.commit is None or args.date is None:
        found = git_commit_and_date(args.megatron)
        if found is None:
            parser.error(f"{args.megatron} is not a git work tree: give --commit and --date")
        args.commit = args.commit or found[0]
        args.date = args.date or found[1]
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.date):
        parser.error("--date must be YYYY-MM-DD")
    return args


def main(argv=None) -> int:
    args = parse_command_line(argv)
    try:
        collected = collect(args.megatron.resolve())
    except GeneratorError as exc:
        print(f"megatron_options: {exc}", file=sys.stderr)
        return 1
    text = render(collected, args.commit, args.date)
    old = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
    write_atomically(args.out, text)
    report_changes(old, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
