"""The docs name every event type the API accepts."""

from pathlib import Path

from runs.domain.cloudevents import SCHEMAS

ROOT = Path(__file__).resolve().parents[1]


def test_every_event_type_and_field_is_documented():
    text = (ROOT / "docs" / "EVENTS.md").read_text()
    for type_, fields in SCHEMAS.items():
        row = next((line for line in text.splitlines() if line.startswith(f"| `{type_}` |")), None)
        assert row is not None, f"{type_} is missing from docs/EVENTS.md"
        for name in fields:
            assert f"`{name}`" in row, f"{type_}.{name} is missing from docs/EVENTS.md"


def _tracked_text_files():
    import subprocess

    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        path = ROOT / name
        if path.suffix in (".py", ".md", ".html", ".txt", ".toml", ".sh", ".cfg") or path.name in ("Makefile", "run"):
            yield name, path.read_text(errors="replace")


def test_nothing_points_outside_the_repository():
    """The domain reference is docs/DOMAIN.md: no file cites a copy a newcomer does not have."""
    outside = [name for name, text in _tracked_text_files() if "../" + "shared" in text]
    assert outside == []


def test_every_path_architecture_md_names_exists():
    import re

    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`((?:fleetops|runs|incidents|tests|templates|static|docs)/[\w/.-]*)`", text))
    named |= set(re.findall(r"(?<![\w/])((?:fleetops|runs|incidents)/[\w/]+\.py)\b", text))  # not tests/runs/...
    assert named, "ARCHITECTURE.md names no path"
    missing = sorted(path for path in named if not (ROOT / path.split(":")[0]).exists())
    assert missing == []


def test_a_newcomer_finds_each_concern_in_two_hops():
    """README -> docs/ARCHITECTURE.md's "Where to find" -> the file."""
    readme = (ROOT / "README.md").read_text()
    assert "(docs/ARCHITECTURE.md)" in readme and "(docs/DOMAIN.md)" in readme
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    table = text[text.index("## Where to find") : text.index("## The tree")]
    for question in (
        "where an event type is parsed",
        "where an event is applied",
        "where goodput is computed",
        "where the Slurm drain runs",
        "where the weekly PDF is built",
        "where a new detector goes",
        "where a new event type goes",
        "where a new cluster adapter goes",
        "where a new page goes",
    ):
        assert f"| {question}" in table, question


def _defined_names() -> tuple[set[str], dict[str, set[str]]]:
    """Every name the project defines at module or class level, and by module file the names it defines there."""
    import ast
    import re

    everywhere, by_file = set(), {}
    for package in ("runs", "incidents", "fleetops", "fleetops_agent", "fleetops_client", "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            names = set()
            bodies = [ast.parse(path.read_text()).body]
            while bodies:
                for node in bodies.pop():
                    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        names.add(node.name)
                        if isinstance(node, ast.ClassDef):
                            bodies.append(node.body)
                    elif isinstance(node, ast.Assign):
                        names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                        names.add(node.target.id)
            by_file[path.relative_to(ROOT).as_posix()] = names
            everywhere |= names
    # The environment variables settings read (env("DATABASE_URL"), env.int("LOGIN_FAILURE_LIMIT", ...)).
    everywhere |= set(re.findall(r'env(?:\.\w+)?\("([A-Z0-9_]+)"', (ROOT / "fleetops" / "settings.py").read_text()))
    return everywhere, by_file


def _code_like(token: str) -> bool:
    """A name as code spells it: with an underscore, a dot, a call's parentheses or a capital past its first letter."""
    import re

    if not re.fullmatch(r"[A-Za-z_][\w.]*(\(\))?", token) or re.search(r"\.(py|html|md|json|lock|txt)$", token):
        return False
    return "_" in token or "." in token or token.endswith("()") or token[1:] != token[1:].lower()


def _is_module(path: str) -> bool:
    return (ROOT / path).with_suffix(".py").exists() or (ROOT / path).is_dir()


# Named in ARCHITECTURE.md and defined outside the project: Django, PostgreSQL, libraries, other systems' fields.
OUTSIDE_NAMES = {"SearchQuery", "SearchRank", "include()", "create()", "request.htmx", "startsAt"}
COLUMNS = {"search_vector"}  # made by a migration (incidents/migrations/0011_search_vectors.py), no model field


def test_every_name_architecture_md_cites_exists():
    """A name in backticks is defined in the project (a function, class, constant, setting, field or module); one
    cited in "Where to find" after a module's path is defined in that module, or in that package's modules."""
    import re

    everywhere, by_file = _defined_names()
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    missing = []
    modules = {path.stem for path in ROOT.glob("*/**/*.py")} | {
        path.name for path in ROOT.glob("*/**/") if path.is_dir()
    }
    for token in sorted({t for t in re.findall(r"`([^`\n]+)`", text) if _code_like(t)} - OUTSIDE_NAMES - COLUMNS):
        parts = token.removesuffix("()").split(".")
        # runs.domain.cloudevents.binary_event: a module, then names in it; services._entry: a module by its name
        module = max((i for i in range(1, len(parts) + 1) if _is_module("/".join(parts[:i]))), default=0)
        module = module or int(len(parts) > 1 and parts[0] in modules)
        missing += [f"`{token}`: {name}" for name in parts[module:] if name not in everywhere and name not in SCHEMAS]
    where_to_find = text[text.index("## Where to find") : text.index("## The tree")]
    for row in where_to_find.splitlines()[2:]:
        where = None
        for token in re.findall(r"`([^`\n]+)`", row):
            path = token.split(":")[0]
            if re.fullmatch(r"(runs|incidents|fleetops\w*|tests)/[\w/]+(\.py|/)?", path) and (ROOT / path).exists():
                where = path
            elif where and _code_like(token) and token not in OUTSIDE_NAMES | COLUMNS and "." not in token:
                files = [f for f in by_file if f == where or f.startswith(where.rstrip("/") + "/")]
                if not any(token.removesuffix("()") in by_file[f] for f in files):
                    missing.append(f"`{token}` is not in {where} ({row[:50]}...)")
    assert not missing, "\n".join(missing)
