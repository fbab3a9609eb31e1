"""Where a page lives (docs/ARCHITECTURE.md, "Where a page lives"): one rule, held here.

- A page about one app's record is in that app's pages/ package (runs/pages/, incidents/pages/), its templates under
  templates/runs/ or templates/incidents/. A page that reads both apps is in fleetops/console/, its templates under
  templates/console/.
- What else the URL map routes to is not a page: the REST APIs (runs/api/, incidents/api/), the webhook intakes
  (incidents/intake/), and Django's own views (login, logout, the admin) and the API schema's.
- At the root of templates/ only base.html and what base.html includes: every page of both apps uses them.
  templates/registration/ holds Django's login templates.
"""

import ast
import re
import types
from pathlib import Path

from django.urls import URLPattern, URLResolver, get_resolver, path
from django.urls.resolvers import RoutePattern

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"

APPS = ("runs", "incidents", "fleetops")
# Where the pages are, and the template folder each one renders from.
PAGE_HOMES = {"runs.pages": "runs", "incidents.pages": "incidents", "fleetops.console": "console"}
# Routed, and not pages: the REST APIs and the webhook intakes (JSON in, JSON out).
NOT_PAGES = ("runs.api", "incidents.api", "incidents.intake")
TEMPLATE_FOLDERS = ("runs", "incidents", "console", "registration")
# The only templates at the root: the base every page extends, and the search box it includes on every page.
SHARED_AT_ROOT = {"base.html", "_search_box.html"}


def _in(module: str, packages) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def routes(resolver: URLResolver, prefix: str = ""):
    """(route, URL name, the module of the view it resolves to) for every pattern of the URL map, included ones too."""
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            yield from routes(pattern, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            callback = pattern.callback
            view = getattr(callback, "view_class", None) or getattr(callback, "cls", None) or callback
            yield prefix + str(pattern.pattern), pattern.name, view.__module__


def misplaced(found) -> list[str]:
    """The routes of the project whose view is neither in a page home nor one of the routed non-pages."""
    return [
        f"/{route} ({name}): {module}"
        for route, name, module in found
        if module.split(".")[0] in APPS and not _in(module, PAGE_HOMES) and not _in(module, NOT_PAGES)
    ]


def test_every_page_is_in_its_apps_pages_package_or_the_console():
    found = list(routes(get_resolver()))
    wrong = misplaced(found)
    assert not wrong, "pages outside runs/pages/, incidents/pages/ and fleetops/console/:\n" + "\n".join(wrong)
    homes_seen = {home for _, _, module in found for home in PAGE_HOMES if _in(module, [home])}
    assert homes_seen == set(PAGE_HOMES), "the walk of the URL map missed a page home"


def test_it_names_a_view_put_back_outside_the_pages():
    """A page in runs/views.py, as before issue 44, is named with its route."""
    views = types.ModuleType("runs.views")
    exec("def fleet(request):\n    pass\n", views.__dict__)
    resolver = URLResolver(RoutePattern(""), [path("fleet", views.fleet, name="fleet")])
    assert misplaced(routes(resolver)) == ["/fleet (fleet): runs.views"]


def _templates() -> list[str]:
    return sorted(str(p.relative_to(TEMPLATES)) for p in TEMPLATES.rglob("*") if p.is_file())


def _reached(names) -> set[str]:
    """The templates the given ones extend or include, and those the ones reached extend or include, and so on."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen or not (TEMPLATES / name).is_file():
            continue
        seen.add(name)
        text = (TEMPLATES / name).read_text()
        todo += [m.split("#")[0] for m in re.findall(r"""{%\s*(?:extends|include)\s+["']([^"']+)["']""", text)]
    return seen


def test_every_template_is_in_its_apps_folder_the_consoles_or_shared_at_the_root():
    names = _templates()
    wrong = [n for n in names if "/" not in n and n not in SHARED_AT_ROOT]
    wrong += [n for n in names if "/" in n and n.split("/")[0] not in TEMPLATE_FOLDERS]
    assert not wrong, f"templates outside templates/<app>/, templates/console/ and the shared root files: {wrong}"
    # What stays at the root is shared: reached from a page of each app.
    for app in ("runs", "incidents"):
        reached = _reached(n for n in names if n.startswith(app + "/"))
        assert SHARED_AT_ROOT <= reached, f"not used by the pages of {app}: {SHARED_AT_ROOT - reached}"


def test_each_page_renders_templates_of_its_own_folder():
    """runs' pages render templates/runs/, incidents' templates/incidents/, the console's templates/console/; any
    page may render a partial of base.html (the nav's count of open incidents)."""
    wrong = []
    for package, folder in PAGE_HOMES.items():
        for source in sorted(ROOT.joinpath(*package.split(".")).rglob("*.py")):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    name = node.value.split("#")[0]
                    if re.fullmatch(r"[\w/]+\.(html|txt)", name) and not (
                        name.startswith(folder + "/") or name in SHARED_AT_ROOT
                    ):
                        wrong.append(f"{source.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert not wrong, "\n".join(wrong)
