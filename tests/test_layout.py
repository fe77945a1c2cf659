"""The layout's rules, read from the source (every import, function-level ones included):
`fgram.pipeline` never imports Spark; its folders import only those below them (kernels
< io < formats < text < config < tables < report); no module imports another module's private
(`_underscored`) names or reads them through a module it imported; the import graph of
`fgram` has no cycle; no module is over 450 lines, no function over 80 lines of
code but compiled kernels."""

import ast
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "fgram")


def _modules() -> dict[str, str]:
    found = {}
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                mod = "fgram." + os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                found[mod.removesuffix(".__init__")] = path
    found["fgram"] = found.pop("fgram.__init__", os.path.join(ROOT, "__init__.py"))
    return found


def _imports(mod: str, path: str, known: set[str]):
    """(modules it imports, external top-level packages, private names it takes from
    other fgram modules)."""
    tree = ast.parse(open(path).read())
    package = mod if path.endswith("__init__.py") else mod.rpartition(".")[0]
    inner, outer, private, aliases = set(), set(), [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                (inner if a.name.startswith("fgram") else outer).add(
                    a.name if a.name.startswith("fgram") else a.name.split(".")[0]
                )
                if a.asname and a.name in known:
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("fgram"):
                outer.add(source.split(".")[0])
                continue
            for a in node.names:
                full = f"{source}.{a.name}"
                if full in known:
                    inner.add(full)
                    aliases[a.asname or a.name] = full
                else:
                    inner.add(source)
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        private.append(f"{mod} imports {a.name} from {source}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and aliases[node.value.id] != mod
        ):
            private.append(f"{mod} reads {aliases[node.value.id]}.{node.attr}")
    return {m for m in inner if m in known and m != mod}, outer, private


def _found(finder, reads) -> list[str]:
    """``module: finding`` for each finding of ``finder`` (a module's source -> what a
    rule found in it) in the package's modules that ``reads`` (a module's name -> bool)."""
    return [
        f"{mod}: {c}"
        for mod, path in _modules().items()
        if reads(mod)
        for c in finder(open(path).read())
    ]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (its modules in order), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(v):
        state[v] = 1
        path.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w) :] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def _graph():
    mods = _modules()
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_import_graph_has_no_cycle():
    graph = {m: inner for m, (inner, _, _) in _graph().items()}
    assert len(graph) > 20 and "fgram.jobs.table.driver" in graph
    assert _cycle(graph) is None


def test_the_library_never_imports_spark():
    spark = {
        m: outer & {"pyspark", "py4j"}
        for m, (_, outer, _) in _graph().items()
        if m.startswith("fgram.pipeline")
    }
    assert {m: s for m, s in spark.items() if s} == {}
    assert any(
        "pyspark" in outer for m, (_, outer, _) in _graph().items() if m.startswith("fgram.spark")
    )  # the rule sees imports where they are


def test_no_module_takes_another_modules_private_names():
    assert [p for _, (_, _, private) in _graph().items() for p in private] == []


def test_tests_use_public_names_only():
    """The tests reach fgram through its public names (the seams a user has too)."""
    known = set(_modules())
    here = os.path.dirname(__file__)
    private = []
    for folder, _, files in sorted(os.walk(here)):
        for name in sorted(files):
            if name.endswith(".py"):
                private += _imports(f"tests.{name[:-3]}", os.path.join(folder, name), known)[2]
    assert private == []


# fgram.pipeline's parts, lowest first: a part imports only from parts below it (and
# itself). errors and records serve every part; models are standalone.
LAYERS = {
    "errors": 0,
    "records": 0,
    "models": 0,
    "kernels": 1,
    "io": 2,
    "formats": 3,
    "text": 3.2,  # reads documents through the formats' inputs; the configs name its options
    "tables": 4,
    "config": 3.5,  # between the formats it reads and the readers that parse counts
    "report": 5,
}


def _part(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["fgram", "pipeline"] else None


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """The imports of graph (module -> modules it imports) that go up the layers."""
    return sorted(
        f"{m} imports {dep}"
        for m, inner in graph.items()
        if _part(m) is not None
        for dep in inner
        if (_part(dep) is not None and _part(dep) != _part(m))
        and LAYERS[_part(dep)] >= LAYERS[_part(m)]
        or dep.startswith(("fgram.jobs", "fgram.cli", "fgram.spark"))
    )


def test_the_library_imports_downward_only():
    graph = {m: inner for m, (inner, _, _) in _graph().items()}
    assert {_part(m) for m in graph} - {None} == set(LAYERS)  # every part has its place
    assert _upward(graph) == []


def test_the_rule_sees_upward_imports():
    kernel, index = "fgram.pipeline.kernels.counting", "fgram.pipeline.tables.index"
    graph = {kernel: {index}, index: {kernel, "fgram.jobs.annotate"}}
    assert _upward(graph) == [
        f"{kernel} imports {index}",
        f"{index} imports fgram.jobs.annotate",
    ]


def test_the_library_has_a_handful_of_top_level_modules():
    top = sorted(n for n in os.listdir(os.path.join(ROOT, "pipeline")) if n.endswith(".py"))
    assert top == ["__init__.py", "errors.py", "records.py"]


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines but its docstring's."""
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def test_code_lines_leave_the_docstring_out():
    tree = ast.parse('def f():\n    """one\n    two"""\n    return 1\n')
    assert _code_lines(tree.body[0]) == 2


def test_modules_and_functions_are_short():
    long_files, long_functions = [], []
    for mod, path in _modules().items():
        source = open(path).read()
        if source.count("\n") > 450:
            long_files.append(mod)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                compiled = any("compiled" in ast.unparse(d) for d in node.decorator_list)
                if _code_lines(node) > 80 and not compiled:
                    long_functions.append(f"{mod}.{node.name}")
    assert long_files == []
    assert long_functions == []  # compiled kernels apart


ENGINES = {"spark", "local"}  # "auto" is resolved where the executor is chosen alone
DECIDE_ENGINES = ("fgram.pipeline.config", "fgram.jobs.engines")  # the engine's two rooms


def _engine_compares(source: str, names: set[str] = ENGINES) -> list[str]:
    """The comparisons in ``source`` with an engine's name (``x == "spark"``,
    ``engine in ("local", ...)``): a stage asks the executor what it can do instead.
    (With ``names``: the comparisons with any of them.)"""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            strings = {
                c.value
                for side in sides
                for c in ast.walk(side)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            }
            if strings & names:
                found.append(ast.unparse(node))
    return found


def test_the_engine_rule_sees_comparisons():
    source = 'a = cfg.engine == "local"\nb = ex.name in ("spark",)\nc = m.startswith("local")'
    assert _engine_compares(source) == ["cfg.engine == 'local'", "ex.name in ('spark',)"]


def test_no_engine_name_is_compared_past_the_config_and_the_executor():
    assert _found(_engine_compares, lambda mod: not mod.startswith(DECIDE_ENGINES)) == []


LAYOUT_NAMES = {"fgram", "olmo", "megatron", "hf"}  # `formats.layouts.LAYOUTS`


def test_the_layout_rule_sees_comparisons():
    source = 'a = layout == "fgram"\nb = cfg.layout in ("olmo", "megatron")\nc = t.raw'
    assert _engine_compares(source, LAYOUT_NAMES) == [
        "layout == 'fgram'",
        "cfg.layout in ('olmo', 'megatron')",
    ]


def test_no_tag_layout_is_known_by_its_name_past_its_object():
    """A format asks its `TagLayout` (raw, indexed, tokens beside) and never compares
    a layout's name (shard formats named alike, "megatron", are not layouts)."""

    def layout_names(source: str) -> list[str]:
        return [c for c in _engine_compares(source, LAYOUT_NAMES) if "format" not in c]

    assert _found(layout_names, lambda mod: mod.startswith(("fgram.pipeline", "fgram.jobs"))) == []


def _marker_paths(source: str) -> list[str]:
    """Paths ``source`` spells with "done" in them (``join(folder, "done", ...)``,
    ``folder.child(f"{u}.done.json")``): completion markers of a scheme of its own."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in ("join", "child") and any(
                isinstance(c, ast.Constant) and isinstance(c.value, str) and "done" in c.value
                for arg in node.args
                for c in ast.walk(arg)
            ):
                found.append(ast.unparse(node))
    return found


def test_the_marker_rule_sees_marker_paths():
    source = 'a = os.path.join(s, "done", f"{c:08d}")\nb = wf.join(p, f"unit-{u}.done.json")'
    assert _marker_paths(source) == [
        "os.path.join(s, 'done', f'{c:08d}')",
        "wf.join(p, f'unit-{u}.done.json')",
    ]


def test_every_job_marks_its_units_done_one_way():
    """One completion marker scheme (`fgram.pipeline.io.markers`) for every job."""
    assert _found(_marker_paths, lambda mod: mod != "fgram.pipeline.io.markers") == []


# the steps every job takes in one order (`fgram.jobs.sequence`): called there alone
SEQUENCE_STEPS = {"chosen_engine", "held_output"}


def _steps_called(source: str) -> list[str]:
    """The calls in ``source`` of a step the run sequence takes for every job."""
    return [
        ast.unparse(node.func)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", "")) in SEQUENCE_STEPS
    ]


def test_the_sequence_rule_sees_the_steps():
    source = "c = chosen_engine(cfg)\nwith locks.held_output(o, True) as out: pass\nf(cfg)"
    assert _steps_called(source) == ["chosen_engine", "locks.held_output"]


def test_every_job_runs_in_the_one_sequence():
    """The engine chosen and the output locked and checked again under the lock by the
    run sequence alone: no job spells out its own order."""
    takes_steps = ("fgram.jobs.sequence", "fgram.jobs.engines", "fgram.pipeline.io.locks")
    assert _found(_steps_called, lambda mod: mod not in takes_steps) == []


HOOKS_AFTER_PLACES = ("ahead", "plan", "claim", "stages", "published", "failed")


def _hooks_given_the_output(source: str) -> list[str]:
    """The run sequence's hooks (after `Job.places`) in ``source`` that take a parameter
    named ``out``: the output's places are derived once, by ``places``."""
    return [
        f"{node.name}({a.arg})"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name in HOOKS_AFTER_PLACES
        for a in node.args.args
        if a.arg == "out"
    ]


def test_the_places_rule_sees_the_output_handed_on():
    source = "class J(Job):\n def plan(self, out): pass\n def places(self, out): pass"
    assert _hooks_given_the_output(source) == ["plan(out)"]


def test_only_places_derives_from_the_output():
    """A job's output reaches it once, in ``places`` (its staging folder and any other
    folder of the run); no later step is handed the output to derive a place again."""
    assert _found(_hooks_given_the_output, lambda mod: mod.startswith("fgram.jobs")) == []


def _place_branches(source: str) -> list[str]:
    """Where ``source`` asks whether a place is a path or a `Location` (``isinstance(x,
    str)``, ``getattr(x, "uri", x)``): every place is a `Location` there, which says
    where it is (``.local``, `workdir.on_store`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        args = node.args
        if node.func.id == "isinstance" and len(args) == 2 and ast.unparse(args[1]) == "str":
            found.append(ast.unparse(node))
        if (
            node.func.id == "getattr"
            and len(args) >= 2
            and isinstance(args[1], ast.Constant)
            and args[1].value == "uri"
        ):
            found.append(ast.unparse(node))
    return found


def test_the_place_rule_sees_branches():
    source = 'a = f if isinstance(f, str) else f.uri\nb = getattr(p, "uri", p)\nc = len(s)'
    assert sorted(_place_branches(source)) == ["getattr(p, 'uri', p)", "isinstance(f, str)"]


def test_no_job_asks_whether_a_place_is_a_path():
    assert _found(_place_branches, lambda mod: mod.startswith("fgram.jobs")) == []


def _config_places() -> set[str]:
    """The names of the fields that hold a place, in every command's config."""
    from fgram.pipeline.config import audit, commands, tools  # noqa: F401 - their configs
    from fgram.pipeline.config.options import Options

    return {name for cls in Options.__subclasses__() for name in cls.places()}


def _places_made_again(source: str) -> list[str]:
    """Where ``source`` makes a `Location` of a config's place (``as_location(cfg.output,
    ...)``, ``locate(cfg.table, ...)``): a config holds its places as `Location`s, made
    once when it is."""
    found, places = [], _config_places()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
            continue
        first = node.args[0]
        if (
            node.func.id in ("as_location", "locate")
            and isinstance(first, ast.Attribute)
            and first.attr in places
        ):
            found.append(ast.unparse(node))
    return found


def test_the_config_place_rule_sees_a_place_made_again():
    source = "a = as_location(cfg.output, s)\nb = locate(self.cfg.table)\nc = locate(uri, s)"
    assert _places_made_again(source) == ["as_location(cfg.output, s)", "locate(self.cfg.table)"]


def test_a_config_place_is_a_location_already():
    """No job, command or function makes a `Location` of its config's place again."""
    reads = lambda mod: mod.startswith(("fgram.jobs", "fgram.cli", "fgram.api"))  # noqa: E731
    assert _found(_places_made_again, reads) == []


# the library's doors: a caller may name a place by its path or URI there, made a
# `Location` at once (`publish.as_location`); past them every place is a `Location`
DOORS = {
    "fgram.pipeline.io.publish": {"as_location", "check_output", "foreign_output"},
    "fgram.pipeline.io.storage": {"upload"},
    "fgram.pipeline.tables.versions": {
        "check_root", "list_versions", "current", "version_path", "switch_current",
        "clear_leftovers", "prune", "resolve_table", "table_part", "open_table",
    },
    "fgram.pipeline.tables.index": {"write_index", "open"},
    "fgram.pipeline.tables.embed": {"open"},
    "fgram.pipeline.tables.tags": {"open_tags", "open", "training_sequences"},
    "fgram.pipeline.tables.verify": {"verify"},
}  # fmt: skip


def _path_or_place(source: str) -> list[str]:
    """The functions of ``source`` taking a place as a path or a `Location` (a parameter
    annotated with both ``str`` and ``Location``), and any ``Place`` alias."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id == "Place":
            found.append("Place")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in node.args.args + node.args.kwonlyargs:
                names = set() if arg.annotation is None else set(
                    ast.unparse(arg.annotation).replace(" ", "").split("|")
                )  # fmt: skip
                if {"str", "Location"} <= names:
                    found.append(node.name)
    return found


def test_the_place_door_rule_sees_both_kinds():
    source = "def f(a: str | Location, b: Location): pass\ndef g(p: Location): pass\nx: Place"
    assert sorted(_path_or_place(source)) == ["Place", "f"]


def test_a_place_is_a_location_past_the_library_doors():
    """Places are `Location`s: only the doors of `DOORS` take a path as well, and no
    ``Place = str | Location`` is left to carry either kind inward."""
    found = {}
    for line in _found(_path_or_place, lambda mod: mod.startswith("fgram.")):
        mod, name = line.split(": ")
        found.setdefault(mod, set()).add(name)
    assert found == DOORS


def test_the_tests_mirror_the_package():
    """A module's tests are where it is (``tests/pipeline/kernels/`` for
    ``fgram/pipeline/kernels/``); what they share is in ``tests/support/``, no test there."""
    here = os.path.dirname(os.path.abspath(__file__))
    strays = []
    for folder, subs, files in os.walk(here):
        subs[:] = [s for s in subs if not s.startswith((".", "__"))]
        rel = os.path.relpath(folder, here)
        tests = [f for f in files if f.startswith("test_") and f.endswith(".py")]
        if rel == "support":
            strays += [f"support/{f}" for f in tests]
        elif rel != "." and not os.path.isdir(os.path.join(ROOT, rel)):
            strays.append(rel)
    assert strays == []
