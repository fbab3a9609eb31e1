"""Imports point one way (docs/ARCHITECTURE.md, "Layers"): an AST walk over every module of runs/, incidents/ and
fleetops/, function-local imports included, with no dependency beyond the standard library.

- The domain packages (runs/domain, incidents/domain) import nothing from Django, DRF or Celery, and nothing of the
  project outside a domain package.
- runs never imports incidents, nor the console pages that show both (fleetops/console).
- Layers: domain <- models <- selectors/services <- tasks/views/api. A module imports its own layer or a lower one; a
  module inside a selectors/ or services/ package (runs/selectors/goodput.py) is of that package's layer.
  fleetops' plumbing (settings, the Celery app, roles, paging, the page cache, the read replica's router, JSON parsing,
  middleware) may be imported by any layer but the domain, and imports no app.
A failure names the file, the line and the import. What it cannot see: lookups by string (a task by its pinned name,
settings' dotted paths, include() in URL maps) and the ORM's reverse relations; docs/ARCHITECTURE.md says where those
cross the layers.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = ("runs", "incidents", "fleetops")
FRAMEWORKS = ("django", "rest_framework", "celery", "kombu", "drf_spectacular", "django_htmx", "psycopg")

DOMAIN, MODELS, SERVICES, INTERFACE, PLUMBING = "domain", "models", "services", "interface", "plumbing"
RANK = {DOMAIN: 0, MODELS: 1, SERVICES: 2, INTERFACE: 3}
# Modules named for a job of the selectors/services layer: reads, writes, and what they run on.
SERVICE_FILES = {
    "selectors",
    "services",
    "engine",
    "steps",
    "breaker",
    "dryrun",  # a playbook step put to the real run's checks, nothing done (incidents/playbooks/dryrun.py)
    "spares",
    "retention",
    "charts",
    "rendering",
    "quotas",
    "feed",  # the demo fleet's agents and trainer (incidents/demo/feed.py)
    "login",  # the demo login, made once and kept (incidents/demo/login.py)
}
INTERFACE_FILES = {"tasks", "views", "urls", "forms", "admin", "apps", "polling"}
INTERFACE_PACKAGES = {"api", "pages", "console", "management", "templatetags"}
PLUMBING_MODULES = {
    "settings", "policies", "celery", "roles", "paging", "pagecache", "replica", "jsonparse", "bodylimit", "middleware",
    "__init__",
}  # fmt: skip


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name of the project; None for one no rule places (the test asks to place it)."""
    parts = module.split(".")
    if "domain" in parts:
        return DOMAIN
    if parts[0] == "fleetops" and len(parts) == 2 and parts[1] in PLUMBING_MODULES:
        return PLUMBING
    if parts[0] == "fleetops" and (len(parts) == 1 or parts[1] in ("urls", "wsgi", "asgi")):
        return PLUMBING if len(parts) == 1 else INTERFACE
    if INTERFACE_PACKAGES & set(parts[1:-1]) or parts[-1] in INTERFACE_FILES:
        return INTERFACE
    if parts[-1] == "models" or "models" in parts[1:-1]:  # a models module, or a module of a models package
        return MODELS
    if parts[-1] in SERVICE_FILES or "clusters" in parts or {"selectors", "services"} & set(parts[1:-1]):
        return SERVICES
    if parts[-1] == "__init__":
        return SERVICES  # a concern's package: the interface packages and the domain are placed above
    return None


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def sources() -> dict[str, str]:
    """{module: source} of every module the rules cover (migrations are history, not layers)."""
    return {
        module_name(path): path.read_text()
        for app in APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if "migrations" not in path.parts
    }


def imports(module: str, source: str):
    """(line, imported module, as written) for each import in the module, function-local ones included."""
    package = module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            written = f"from {'.' * node.level}{node.module or ''} import {', '.join(a.name for a in node.names)}"
            # `from incidents import tasks` imports the module incidents.tasks when that is a module.
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base, written


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def normalized(target: str) -> str:
    """A package import counts as its __init__ module."""
    path = ROOT.joinpath(*target.split("."))
    return f"{target}.__init__" if (path / "__init__.py").exists() else target


def violations(modules: dict[str, str]) -> list[str]:
    found = []
    for module, source in modules.items():
        own = layer_of(module)
        path = module.replace(".", "/") + ".py"
        for line, target, written in imports(module, source):
            where = f"{path}:{line}: {written}"
            top = target.split(".")[0]
            if own == DOMAIN and top in FRAMEWORKS:
                found.append(f"{where} -- the domain imports no framework")
                continue
            if top not in APPS:
                continue
            target_layer = layer_of(normalized(target))
            above_both = target.startswith(("fleetops.console", "fleetops.urls"))
            if module.startswith("runs.") and (top == "incidents" or above_both):
                found.append(f"{where} -- runs never imports incidents or the console above both")
            elif above_both and not module.startswith(("fleetops.console", "fleetops.urls")):
                found.append(f"{where} -- the console and the URL map sit above both apps: nothing below imports them")
            elif own == DOMAIN and target_layer != DOMAIN:
                found.append(f"{where} -- the domain imports only the domain")
            elif own == PLUMBING and target_layer != PLUMBING:
                found.append(f"{where} -- fleetops' plumbing imports no app")
            elif target_layer == PLUMBING or own == PLUMBING:
                continue
            elif target_layer is None:
                found.append(f"{where} -- {target} is in no layer: name it for its job or add it to the rules")
            elif RANK[target_layer] > RANK[own]:
                found.append(f"{where} -- {own} imports {target_layer}: imports point domain <- models <- services")
    return found


def test_every_module_is_in_a_layer():
    unplaced = [module for module in sources() if layer_of(module) is None]
    assert not unplaced, f"name these for their job or give them a layer in tests/test_layering.py: {unplaced}"


def test_imports_point_one_way():
    found = violations(sources())
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("module", "line", "reason"),
    [
        ("runs.services.ingest", "from incidents import tasks", "runs never imports incidents"),
        ("runs.selectors.goodput", "from runs.pages import fleet", "services imports interface"),
        ("incidents.services.alerts", "from incidents.pages import board", "services imports interface"),
        ("runs.tasks", "    from incidents.detection.tasks import detect_events", "runs never imports incidents"),
        ("runs.pages.fleet", "from fleetops.console import overview", "runs never imports incidents"),
        ("runs.domain.goodput.engine", "from django.utils import timezone", "the domain imports no framework"),
        ("incidents.domain.xid", "from runs.models import Node", "the domain imports only the domain"),
        ("incidents.playbooks.engine", "from incidents.playbooks import tasks", "services imports interface"),
        ("runs.models.tokens", "from runs import selectors", "models imports services"),
        ("fleetops.roles", "from runs.models import Run", "fleetops' plumbing imports no app"),
        ("fleetops.roles", "from fleetops.console import overview", "sit above both apps"),
        ("incidents.pages.board", "from fleetops.console import overview", "sit above both apps"),
        ("runs.pages.quarantine", "from fleetops import urls", "runs never imports incidents"),
    ],
)
def test_it_names_the_offending_import(module, line, reason):
    modules = sources()
    body = f"def added():\n{line}\n" if line.startswith(" ") else f"{line}\n"
    modules[module] = modules[module] + "\n" + body
    found = violations(modules)
    assert len(found) == 1 and reason in found[0] and line.strip() in found[0], found
    assert found[0].startswith(module.replace(".", "/") + ".py:")


MODULE_LINES_MAX = 500  # a module past this is a package waiting to be made (docs/ARCHITECTURE.md, "The tree")


def test_no_module_outgrows_its_topic():
    long = {m: n for m, source in sources().items() if (n := len(source.splitlines())) > MODULE_LINES_MAX}
    assert not long, f"split these into a package of topic modules (over {MODULE_LINES_MAX} lines): {long}"
